//! What a plane exports: the manifest's workdir-relative paths and globs
//! (`out/**`, `report.md`, `logs/*.txt`), matched one path segment at a time.
//! A pattern that matches a path exports it and, when it is a directory,
//! everything under it.

use glob::{MatchOptions, Pattern};

/// Segments match exactly as written: case counts, and `*` matches a
/// leading dot (`out/*` exports `out/.env`).
const OPTIONS: MatchOptions = MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: false,
};

enum Segment {
    /// `**`: any number of segments, none included.
    AnyDepth,
    One(Pattern),
}

/// A plane's exports, as the host passed them.
pub struct ExportSet {
    patterns: Vec<Vec<Segment>>,
    /// Paths never served nor listed, whatever the patterns match: the
    /// door's own state (its directory, its tokens, the compile cache).
    withheld: Vec<Vec<String>>,
}

impl ExportSet {
    /// The set `patterns` name. The host refuses at launch a pattern that is
    /// absolute, has a `..` segment or does not parse; one that reaches the
    /// door anyway exports nothing.
    pub fn new(patterns: &[String]) -> ExportSet {
        let patterns = patterns.iter().filter_map(|p| parse(p)).collect();
        ExportSet {
            patterns,
            withheld: Vec::new(),
        }
    }

    /// The set, less `withheld` (workdir-relative paths, `/`-separated) and
    /// everything under each.
    pub fn withholding(mut self, withheld: &[String]) -> ExportSet {
        self.withheld = withheld
            .iter()
            .map(|w| {
                w.split('/')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            })
            .filter(|w: &Vec<String>| !w.is_empty())
            .collect();
        self
    }

    fn is_withheld(&self, path: &[String]) -> bool {
        self.withheld.iter().any(|w| path.starts_with(w))
    }

    /// Whether `path` (workdir-relative segments) is exported: a pattern
    /// matches it or one of the directories above it, and it is not
    /// withheld.
    pub fn exported(&self, path: &[String]) -> bool {
        !self.is_withheld(path)
            && self
                .patterns
                .iter()
                .any(|pattern| walk(pattern, path).exported)
    }

    /// Whether an export may lie under the directory `path`: it is shown in
    /// the listing above it, and listed with what it holds that is exported.
    pub fn leads_to(&self, path: &[String]) -> bool {
        !self.is_withheld(path)
            && self
                .patterns
                .iter()
                .any(|pattern| walk(pattern, path).leads)
    }

    /// Whether the directory `path` is served: exported, or on the way to
    /// an export.
    pub fn reaches(&self, path: &[String]) -> bool {
        path.is_empty() || self.exported(path) || self.leads_to(path)
    }
}

fn parse(pattern: &str) -> Option<Vec<Segment>> {
    let trimmed = pattern.trim_end_matches('/');
    let trimmed = trimmed.strip_prefix("./").unwrap_or(trimmed);
    if trimmed.is_empty() || trimmed == "." {
        return Some(vec![Segment::AnyDepth]);
    }
    if trimmed.starts_with('/') {
        return None;
    }
    trimmed
        .split('/')
        .map(|segment| match segment {
            "**" => Some(Segment::AnyDepth),
            "" | "." | ".." => None,
            glob => Pattern::new(glob).ok().map(Segment::One),
        })
        .collect()
}

struct Walk {
    /// The whole pattern matched the path or a directory above it.
    exported: bool,
    /// The path was used up with some of the pattern left.
    leads: bool,
}

/// Runs `pattern` over `path`, tracking every position in the path the
/// pattern's segments so far can reach (linear in both, whatever `**` does).
fn walk(pattern: &[Segment], path: &[String]) -> Walk {
    let end = path.len();
    let mut at = vec![false; end + 1];
    at[0] = true;
    let mut leads = false;
    for segment in pattern {
        leads |= at[end];
        at = match segment {
            Segment::AnyDepth => {
                let first = at.iter().position(|&reached| reached);
                (0..=end).map(|i| first.is_some_and(|f| i >= f)).collect()
            }
            Segment::One(glob) => (0..=end)
                .map(|i| i > 0 && at[i - 1] && glob.matches_with(&path[i - 1], OPTIONS))
                .collect(),
        };
        if !at.contains(&true) {
            break;
        }
    }
    Walk {
        exported: at.contains(&true),
        leads,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(patterns: &[&str]) -> ExportSet {
        ExportSet::new(&patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>())
    }

    fn path(text: &str) -> Vec<String> {
        text.split('/')
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    }

    /// Issue 33, "What `exports` names": `[out/**, report.md, logs/*.txt]`.
    #[test]
    fn paths_and_globs_export_what_they_match_and_what_is_under_it() {
        let exports = set(&["out/**", "report.md", "logs/*.txt"]);
        for exported in [
            "out/a",
            "out/a/b/c.bin",
            "out/.env",
            "report.md",
            "report.md/inside",
            "logs/x.txt",
            "logs/x.txt/y",
        ] {
            assert!(exports.exported(&path(exported)), "{exported}");
        }
        // `**` matches no segment too: the directory itself is exported.
        assert!(exports.exported(&path("out")));
        for hidden in [
            "",
            "OUT/a",
            "Report.md",
            "report.md.bak",
            "logs",
            "logs/x.log",
            "logs/a/x.txt",
            "murmur.yaml",
            "state/session.db",
        ] {
            assert!(!exports.exported(&path(hidden)), "{hidden}");
        }
        for way in ["", "out", "logs"] {
            assert!(exports.reaches(&path(way)), "{way}");
        }
        assert!(exports.leads_to(&path("logs")));
        assert!(!exports.leads_to(&path("state")));
        assert!(!exports.leads_to(&path("logs/x.log")));
    }

    #[test]
    fn a_directory_exports_everything_under_it() {
        let exports = set(&["out", "a/b/"]);
        assert!(exports.exported(&path("out")));
        assert!(exports.exported(&path("out/x/y")));
        assert!(exports.exported(&path("a/b/c")));
        assert!(exports.leads_to(&path("a")));
        assert!(!exports.exported(&path("a")));
        assert!(!exports.exported(&path("a/c")));
    }

    #[test]
    fn the_workdir_itself_exports_everything() {
        for whole in [".", "./", "**"] {
            let exports = set(&[whole]);
            assert!(exports.exported(&path("murmur.yaml")), "{whole}");
            assert!(exports.exported(&path("a/b")), "{whole}");
        }
    }

    #[test]
    fn nothing_is_exported_by_an_empty_set_or_a_bad_pattern() {
        for patterns in [
            &[][..],
            &["/etc/**"],
            &["../x"],
            &["a/../b"],
            &["[x"],
            &["a**"],
        ] {
            let exports = set(patterns);
            assert!(!exports.exported(&path("a")), "{patterns:?}");
            assert!(!exports.exported(&path("x")), "{patterns:?}");
            assert!(!exports.leads_to(&path("a")), "{patterns:?}");
        }
    }

    /// Issue 47: the door's own state is never exported, whatever the
    /// globs: not the withheld path, nothing under it, and it leads nowhere.
    #[test]
    fn withheld_paths_are_never_exported() {
        let withheld = ["state".to_string(), "keys/control-token".to_string()];
        for patterns in [
            &["*"][..],
            &["**"],
            &["."],
            &["state/**", "keys/*"],
            &["state"],
        ] {
            let exports = set(patterns).withholding(&withheld);
            for hidden in [
                "state",
                "state/tokens.json",
                "state/a/b",
                "keys/control-token",
            ] {
                assert!(!exports.exported(&path(hidden)), "{patterns:?} {hidden}");
                assert!(!exports.leads_to(&path(hidden)), "{patterns:?} {hidden}");
            }
        }
        let exports = set(&["**"]).withholding(&withheld);
        for shown in ["stateful", "keys", "keys/other", "out/state"] {
            assert!(exports.exported(&path(shown)), "{shown}");
        }
    }

    #[test]
    fn many_any_depths_stay_linear() {
        let exports = set(&["**/**/**/**/**/**/**/**/z"]);
        let long: Vec<String> = (0..2000).map(|i| format!("d{i}")).collect();
        assert!(!exports.exported(&long));
        let mut ends = long.clone();
        ends.push("z".into());
        assert!(exports.exported(&ends));
    }
}
