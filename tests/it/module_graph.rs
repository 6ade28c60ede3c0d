//! Dependencies between the crate's top-level modules point one way (ARCHITECTURE.md): read
//! from the source, every `crate::module` a file names outside comments is an edge, and no
//! module may reach itself again. A new import that closes a cycle fails here with the files
//! that make it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub(crate) type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

pub(crate) fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The code of a line without its comment (`//` outside a string is taken as one: no source
/// line here holds `//` in a string next to a `crate::` path).
pub(crate) fn code_of(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

/// Names of the top-level modules a source text refers to by `crate::name` or inside
/// `use crate::{a, b::c}`.
fn referred(text: &str) -> BTreeSet<String> {
    let code: String = text.lines().map(code_of).collect::<Vec<_>>().join("\n");
    let mut names = BTreeSet::new();
    let word = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group: what follows `{` or a `,` at depth one.
            let mut depth = 1;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 1 => break,
                    '}' => depth -= 1,
                    ',' if depth == 1 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start => {
                        names.insert(word(&group[i..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            names.insert(word(rest));
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph = Graph::new();
    for file in files {
        let relative = file.strip_prefix(src).expect("under src");
        let first = relative.components().next().expect("a component");
        let module = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        for target in referred(&text) {
            if target != module {
                graph
                    .entry(module.clone())
                    .or_default()
                    .entry(target)
                    .or_default()
                    .insert(relative.display().to_string());
            }
        }
    }
    graph
}

/// A path from `from` back to itself, if there is one.
pub(crate) fn cycle_through(graph: &Graph, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().expect("never empty");
        for next in graph.get(last).into_iter().flat_map(|edges| edges.keys()) {
            if next == from {
                let mut cycle = path.clone();
                cycle.push(next.clone());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

#[test]
fn no_top_level_module_depends_on_itself_through_others() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&src);
    assert!(
        graph.len() >= 10,
        "the source tree was read: {:?}",
        graph.keys().collect::<Vec<_>>()
    );
    for module in graph.keys() {
        if let Some(cycle) = cycle_through(&graph, module) {
            let because: Vec<String> = cycle
                .windows(2)
                .map(|step| {
                    let files = &graph[&step[0]][&step[1]];
                    format!("{} -> {} ({:?})", step[0], step[1], files)
                })
                .collect();
            panic!(
                "a dependency cycle: {}\n{}",
                cycle.join(" -> "),
                because.join("\n")
            );
        }
    }
}

#[test]
fn the_reader_finds_paths_and_groups_and_skips_comments() {
    let text = "use crate::engine::Queue;\n\
                use crate::{backend::{Backend, Deliveries}, clock};\n\
                // crate::http is only mentioned\n\
                let x = crate::metrics::LogMetrics::default(); // crate::app too\n";
    let found: Vec<String> = referred(text).into_iter().collect();
    assert_eq!(found, ["backend", "clock", "engine", "metrics"]);
}

#[test]
fn a_cycle_is_found_with_its_path() {
    let mut graph = Graph::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        graph
            .entry(from.into())
            .or_default()
            .entry(to.into())
            .or_default()
            .insert(format!("{from}.rs"));
    }
    assert_eq!(
        cycle_through(&graph, "a"),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(cycle_through(&graph, "d"), None);
}
