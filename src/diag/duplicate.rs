//! Where a duplicated key was first written. The parser names the second occurrence of a
//! key; an operator fixing it wants to see both, so the text is read again for the first.

use std::collections::HashMap;

use granit_parser::{Event, Parser};

use super::Pos;

/// The position of the first `key` in the mapping that repeats it at `second`, if there is
/// such a mapping in `text`.
pub fn first_of(text: &str, key: &str, second: Pos) -> Option<Pos> {
    /// An open collection: a mapping's keys so far and whether its next node is a key.
    enum Frame {
        Map { keys: HashMap<String, Pos>, at_key: bool },
        Seq,
    }
    let options = granit_parser::options! { emit_comments: false };
    let mut frames: Vec<Frame> = Vec::new();
    for item in Parser::new_from_str_with_options(text, options) {
        let Ok((event, span)) = item else { return None };
        let pos = Pos {
            line: u32::try_from(span.start.line()).unwrap_or(u32::MAX),
            col: u32::try_from(span.start.col() + 1).unwrap_or(u32::MAX),
        };
        let starts_node = matches!(
            event,
            Event::Scalar(..)
                | Event::Alias(..)
                | Event::MappingStart(..)
                | Event::SequenceStart(..)
        );
        if starts_node && let Some(Frame::Map { keys, at_key }) = frames.last_mut() {
            if *at_key && let Event::Scalar(text, ..) = &event {
                if text == key && pos == second {
                    return keys.get(key).copied();
                }
                keys.entry(text.to_string()).or_insert(pos);
            }
            *at_key = !*at_key;
        }
        match event {
            Event::MappingStart(..) => {
                frames.push(Frame::Map { keys: HashMap::new(), at_key: true })
            }
            Event::SequenceStart(..) => frames.push(Frame::Seq),
            Event::MappingEnd | Event::SequenceEnd => drop(frames.pop()),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_occurrence_is_found_in_the_mapping_that_repeats_it() {
        let at = |line, col| Pos { line, col };
        let cases: &[(&str, &str, Pos, Option<Pos>)] = &[
            ("{ name: a, name: b }", "name", at(1, 12), Some(at(1, 3))),
            (
                "a:\n  - { x: 1, name: a }\n  - { name: a, y: 2, name: b }\n",
                "name",
                at(3, 22),
                Some(at(3, 7)),
            ),
            ("name: x\nsub: { name: a, name: b }\n", "name", at(2, 17), Some(at(2, 8))),
            ("name: x\nsub: { a: name, name: b }\n", "name", at(2, 17), None),
            ("{ name: a }", "name", at(1, 3), None),
        ];
        for (text, key, second, want) in cases {
            assert_eq!(first_of(text, key, *second), *want, "{text}");
        }
    }
}
