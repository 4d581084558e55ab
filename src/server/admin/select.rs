//! Which profiles a list call returns: a name filter, a status filter and a page. A
//! browser polling a configuration of many profiles then fetches one page of them, not
//! all of them, every time.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::model::ProfileId;
use crate::model::health::Status;

/// The statuses a profile can be in (see `profile_status` in the admin API).
const PROFILE_STATUSES: [Status; 4] =
    [Status::Online, Status::Checking, Status::Degraded, Status::Disabled];

/// The query parameters of a list call, as given.
#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    q: Option<String>,
    status: Option<String>,
    offset: Option<String>,
    limit: Option<String>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    #[error("offset= must be a whole number")]
    Offset,
    #[error("limit= must be a whole number")]
    Limit,
    #[error("status= must be one of online, checking, degraded, disabled")]
    Status,
}

/// What to list: profiles whose name holds `name` (ASCII case ignored) and, when given, in
/// `status`; `limit` of them from the `offset`th on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    name: Option<String>,
    status: Option<Status>,
    offset: usize,
    limit: Option<usize>,
}

impl ListParams {
    /// No parameter at all: the caller gets the whole list in its original shape.
    pub fn is_empty(&self) -> bool {
        self.q.is_none() && self.status.is_none() && self.offset.is_none() && self.limit.is_none()
    }

    pub fn selection(&self) -> Result<Selection, SelectError> {
        let number = |v: &Option<String>, e: SelectError| match v.as_deref() {
            None | Some("") => Ok(None),
            Some(s) => s.parse::<usize>().map(Some).map_err(|_| e),
        };
        let status = match self.status.as_deref() {
            None | Some("") => None,
            Some(s) => Some(
                PROFILE_STATUSES
                    .into_iter()
                    .find(|st| st.as_str() == s)
                    .ok_or(SelectError::Status)?,
            ),
        };
        Ok(Selection {
            name: self.q.as_deref().filter(|q| !q.is_empty()).map(str::to_ascii_lowercase),
            status,
            offset: number(&self.offset, SelectError::Offset)?.unwrap_or(0),
            limit: number(&self.limit, SelectError::Limit)?,
        })
    }
}

/// The result of a selection.
#[derive(Debug, PartialEq, Eq)]
pub struct Selected {
    /// Profiles matching the name and status filters, over every page.
    pub total: usize,
    /// How many profiles matching the name filter are in each status (the status filter
    /// left out, so a page can show what each choice of it would list).
    pub statuses: BTreeMap<&'static str, usize>,
    /// The page: ids of the matching profiles from `offset`, at most `limit`, in
    /// configuration order.
    pub ids: Vec<ProfileId>,
    pub offset: usize,
    pub limit: Option<usize>,
}

/// Selects from profiles given by name, in configuration order; `status_of` gives a
/// profile's status and is called once for each profile matching the name filter.
pub fn select<'a>(
    names: impl Iterator<Item = &'a str>,
    status_of: impl Fn(ProfileId) -> Status,
    sel: &Selection,
) -> Selected {
    let mut statuses = BTreeMap::new();
    let mut total = 0;
    let mut ids = Vec::new();
    let room = sel.limit.unwrap_or(usize::MAX);
    for (id, name) in names.enumerate() {
        if sel.name.as_deref().is_some_and(|q| !contains_ignoring_case(name, q)) {
            continue;
        }
        let st = status_of(id);
        *statuses.entry(st.as_str()).or_insert(0) += 1;
        if sel.status.is_some_and(|want| want != st) {
            continue;
        }
        if total >= sel.offset && ids.len() < room {
            ids.push(id);
        }
        total += 1;
    }
    Selected { total, statuses, ids, offset: sel.offset, limit: sel.limit }
}

/// Whether `hay` holds `needle` (already lower case), ignoring ASCII case.
fn contains_ignoring_case(hay: &str, needle: &str) -> bool {
    let (hay, needle) = (hay.as_bytes(), needle.as_bytes());
    needle.is_empty()
        || hay
            .windows(needle.len())
            .any(|w| w.iter().zip(needle).all(|(a, b)| a.to_ascii_lowercase() == *b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: [&str; 6] = [
        "www.tm.example.test.",
        "eu.tm.example.test.",
        "EU2.tm.example.test.",
        "api.tm.example.test.",
        "us.tm.example.test.",
        "off.tm.example.test.",
    ];

    fn status(id: ProfileId) -> Status {
        [
            Status::Online,
            Status::Degraded,
            Status::Online,
            Status::Checking,
            Status::Degraded,
            Status::Disabled,
        ][id]
    }

    fn params(q: &str, status: &str, offset: &str, limit: &str) -> ListParams {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        ListParams { q: some(q), status: some(status), offset: some(offset), limit: some(limit) }
    }

    fn run(q: &str, st: &str, offset: &str, limit: &str) -> Selected {
        let sel = params(q, st, offset, limit).selection().expect("valid parameters");
        select(NAMES.iter().copied(), status, &sel)
    }

    /// (q, status, offset, limit, total, page ids)
    type Case = (&'static str, &'static str, &'static str, &'static str, usize, &'static [usize]);

    #[test]
    fn filters_by_name_and_status_and_pages() {
        let cases: &[Case] = &[
            ("", "", "", "", 6, &[0, 1, 2, 3, 4, 5]),
            ("", "", "0", "2", 6, &[0, 1]),
            ("", "", "4", "2", 6, &[4, 5]),
            ("", "", "5", "10", 6, &[5]),
            ("", "", "9", "10", 6, &[]),
            ("", "", "", "0", 6, &[]),
            ("eu", "", "", "", 2, &[1, 2]),
            ("Eu2", "", "", "", 1, &[2]),
            ("tm.example", "degraded", "", "", 2, &[1, 4]),
            ("eu", "online", "", "", 1, &[2]),
            ("", "degraded", "1", "1", 2, &[4]),
            ("nothing", "", "", "", 0, &[]),
        ];
        for &(q, st, offset, limit, total, ids) in cases {
            let got = run(q, st, offset, limit);
            assert_eq!(
                (got.total, &got.ids[..]),
                (total, ids),
                "q={q} status={st} {offset}+{limit}"
            );
        }
    }

    #[test]
    fn status_counts_follow_the_name_filter_only() {
        let all = run("", "degraded", "", "1");
        let want: BTreeMap<&str, usize> =
            [("checking", 1), ("degraded", 2), ("disabled", 1), ("online", 2)].into();
        assert_eq!(all.statuses, want);
        assert_eq!(run("eu", "online", "", "").statuses, [("degraded", 1), ("online", 1)].into());
    }

    #[test]
    fn bad_parameters_are_refused_and_none_at_all_is_the_full_list() {
        assert!(ListParams::default().is_empty());
        assert!(!params("", "", "0", "").is_empty());
        assert_eq!(params("", "", "-1", "").selection(), Err(SelectError::Offset));
        assert_eq!(params("", "", "", "ten").selection(), Err(SelectError::Limit));
        assert_eq!(params("", "stopped", "", "").selection(), Err(SelectError::Status));
        assert_eq!(params("", "", "", "").selection(), Ok(Selection::default()));
    }
}
