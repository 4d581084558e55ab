//! The result of the last reload, whatever triggered it, for the admin API
//! (`GET /api/v1/reload`) and the status page's banner: a rejected reload is otherwise
//! only in the log.

use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

/// How one reload (or the startup load) ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReloadResult {
    pub time: SystemTime,
    /// `startup`, `file change`, `SIGHUP`, `admin API`, `etcd change`, `key timing`, …
    pub trigger: String,
    /// The generation served afterwards (the new one, or the one that stayed).
    pub generation: u64,
    /// Each error as `FILE:LINE:COL: message`; empty when the reload applied.
    pub errors: Vec<String>,
}

impl ReloadResult {
    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// The latest result, replaced by each reload.
#[derive(Debug)]
pub struct LastReload(Mutex<ReloadResult>);

impl LastReload {
    /// Starts with the startup load of `generation`.
    pub fn started(generation: u64) -> LastReload {
        LastReload(Mutex::new(ReloadResult {
            time: SystemTime::now(),
            trigger: "startup".to_string(),
            generation,
            errors: Vec::new(),
        }))
    }

    pub fn set(&self, trigger: &str, generation: u64, errors: Vec<String>) {
        let result = ReloadResult {
            time: SystemTime::now(),
            trigger: trigger.to_string(),
            generation,
            errors,
        };
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = result;
    }

    pub fn get(&self) -> ReloadResult {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}
