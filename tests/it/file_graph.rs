//! The crate's files and what they depend on, read from the source: every path a file names
//! (in a `use` or in its code) is followed to the file that defines the item, through
//! re-exports. No file of the crate or of the benchmark may reach itself again. A module's
//! `mod.rs` re-exporting its children is a facade, not a dependency, unless it uses the item
//! itself. Test modules are left out. Names are what count: a method called on a value (an
//! `Engine` method defined in another file) is not an edge.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::module_graph::{code_of, cycle_through, rust_files, Graph};

/// A crate's source (`src/` or `bench/src/`): each file's code without comments and inline
/// test modules.
struct Tree {
    src: PathBuf,
    code: BTreeMap<PathBuf, String>,
}

fn is_test(file: &Path) -> bool {
    file.ends_with("tests.rs") || file.components().any(|c| c.as_os_str() == "tests")
}

/// The code a file compiles outside tests.
fn code_without_tests(text: &str) -> String {
    let code: Vec<&str> = text.lines().map(code_of).collect();
    let code = code.join("\n");
    let start = code.match_indices("#[cfg(test)]").find(|(at, marker)| {
        let rest = code[at + marker.len()..].trim_start();
        let rest = rest.strip_prefix("pub(crate) ").unwrap_or(rest);
        rest.starts_with("mod ")
            && rest
                .split(';')
                .next()
                .is_some_and(|head| head.contains('{'))
    });
    match start {
        Some((at, _)) => code[..at].to_string(),
        None => code,
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every leaf of every `use` statement, with whether the statement is `pub`; and the code with
/// the statements taken out.
fn uses(code: &str) -> (Vec<(Vec<String>, bool)>, String) {
    let mut leaves = Vec::new();
    let mut rest = String::new();
    let mut at = 0;
    while let Some(found) = code[at..].find("use ") {
        let start = at + found;
        let before = code[..start].trim_end();
        let starts_statement = before.is_empty()
            || before.ends_with([';', '{', '}', ']'])
            || before.ends_with("pub")
            || before.ends_with(')');
        if code[..start].ends_with(is_ident) || !starts_statement {
            rest.push_str(&code[at..start + 4]);
            at = start + 4;
            continue;
        }
        let end = code[start..].find(';').map_or(code.len(), |e| start + e);
        let public = before.ends_with("pub") || before.ends_with(')') && before.contains("pub(");
        let tree: String = code[start + 4..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for leaf in expand(&tree) {
            leaves.push((leaf, public));
        }
        rest.push_str(&code[at..start]);
        at = end;
    }
    rest.push_str(&code[at..]);
    (leaves, rest)
}

/// `a::b::{c, d::{e as f}}` as `a::b::c` and `a::b::d::e`.
fn expand(tree: &str) -> Vec<Vec<String>> {
    let split = |path: &str| -> Vec<String> {
        let path = path.split(" as ").next().unwrap_or(path);
        path.split("::")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let Some(open) = tree.find('{') else {
        return vec![split(tree)]
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
    };
    let prefix = split(&tree[..open]);
    let mut items = Vec::new();
    let (mut depth, mut from) = (0, open + 1);
    for (i, c) in tree.char_indices().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    items.push(&tree[from..i]);
                    break;
                }
            }
            ',' if depth == 1 => {
                items.push(&tree[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for item in items.into_iter().filter(|i| !i.trim().is_empty()) {
        for leaf in expand(item.trim()) {
            out.push(prefix.iter().cloned().chain(leaf).collect());
        }
    }
    out
}

/// Paths written in code (`crate::a::B`, `super::c`, `child::f`), not those of `pub(in …)`.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<(usize, char)> = code.char_indices().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        let after_word = i > 0 && (is_ident(chars[i - 1].1) || chars[i - 1].1 == ':');
        if !(c.is_alphabetic() || c == '_') || after_word {
            i += 1;
            continue;
        }
        let mut j = i;
        let end = loop {
            while j < chars.len() && is_ident(chars[j].1) {
                j += 1;
            }
            let end = chars.get(j).map_or(code.len(), |(e, _)| *e);
            let more = code[end..].starts_with("::")
                && code[end + 2..].starts_with(|c: char| c.is_alphabetic() || c == '_');
            if !more {
                break end;
            }
            j = chars
                .iter()
                .position(|(e, _)| *e == end + 2)
                .unwrap_or(chars.len());
        };
        let path = &code[at..end];
        // `pub(in crate::x)` names no item; `for x in crate::y::z()` does.
        if path.contains("::") && !code[..at].ends_with("(in ") {
            out.push(path.split("::").map(String::from).collect());
        }
        i = j.max(i + 1);
    }
    out
}

/// Whether `file`, or a module it lies in, is declared `#[cfg(test)]` by its parent.
fn for_tests_only(src: &Path, file: &Path) -> bool {
    let mut module = file.with_extension("");
    if module.ends_with("mod") {
        module.pop();
    }
    while module != src {
        let Some(name) = module.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            return false;
        };
        let parent = module.parent().expect("under src").to_path_buf();
        let declaring = [parent.join("mod.rs"), parent.with_extension("rs")]
            .into_iter()
            .chain((parent == src).then(|| src.join("lib.rs")))
            .find(|f| f.exists());
        let declared_for_tests = declaring.is_some_and(|f| {
            let text = std::fs::read_to_string(f).expect("a readable source file");
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            lines.windows(2).any(|pair| {
                pair[0] == "#[cfg(test)]"
                    && pair[1].trim_start_matches("pub(crate) ") == format!("mod {name};")
            })
        });
        if declared_for_tests {
            return true;
        }
        module = parent;
    }
    false
}

impl Tree {
    /// Every file of the crate but its roots and what only tests compile.
    fn read_all(src: &Path) -> Tree {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        let roots = [src.join("lib.rs"), src.join("main.rs")];
        files.retain(|f| !roots.contains(f) && !for_tests_only(src, f));
        Tree::of_files(src, files)
    }

    fn of_files(src: &Path, files: Vec<PathBuf>) -> Tree {
        let code = files
            .into_iter()
            .filter(|f| f.exists() && !is_test(f))
            .map(|f| {
                let text = std::fs::read_to_string(&f).expect("a readable source file");
                (f, code_without_tests(&text))
            })
            .collect();
        Tree {
            src: src.to_path_buf(),
            code,
        }
    }

    fn module_of(&self, file: &Path) -> Vec<String> {
        let relative = file.strip_prefix(&self.src).expect("under src");
        let mut parts: Vec<String> = relative
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        parts
    }

    fn file_of(&self, module: &[String]) -> Option<PathBuf> {
        let base = module.iter().fold(self.src.clone(), |p, m| p.join(m));
        [base.with_extension("rs"), base.join("mod.rs")]
            .into_iter()
            .find(|f| self.code.contains_key(f))
    }

    /// `path` as named in `file`, from the crate root; `None` for another crate's.
    fn absolute(&self, file: &Path, path: &[String]) -> Option<Vec<String>> {
        let module = self.module_of(file);
        let first = path.first()?;
        match first.as_str() {
            "crate" => Some(path[1..].to_vec()),
            "self" | "super" => {
                let mut at = module;
                let mut rest = path;
                if rest[0] == "self" {
                    rest = &rest[1..];
                }
                while rest.first().is_some_and(|s| s == "super") {
                    at.pop();
                    rest = &rest[1..];
                }
                Some(at.into_iter().chain(rest.iter().cloned()).collect())
            }
            child => {
                let inside: Vec<String> = module.iter().cloned().chain([child.into()]).collect();
                self.file_of(&inside)
                    .filter(|f| f != file)
                    .map(|_| module.into_iter().chain(path.iter().cloned()).collect())
            }
        }
    }

    fn defines(&self, file: &Path, name: &str) -> bool {
        let code = &self.code[file];
        [
            "struct", "enum", "fn", "trait", "type", "const", "static", "mod", "union",
        ]
        .iter()
        .any(|kind| {
            code.match_indices(&format!("{kind} {name}"))
                .any(|(at, text)| {
                    let before = code[..at].chars().next_back();
                    let after = code[at + text.len()..].chars().next();
                    !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
                })
        })
    }

    /// The file that defines what `path` names, through re-exports.
    fn resolve(&self, path: &[String], depth: usize) -> Option<PathBuf> {
        for n in (0..=path.len()).rev() {
            let Some(file) = self.file_of(&path[..n]) else {
                continue;
            };
            let Some(name) = path.get(n).filter(|name| *name != "*") else {
                return Some(file);
            };
            if self.defines(&file, name) || depth > 8 {
                return Some(file);
            }
            let (leaves, _) = uses(&self.code[&file]);
            for (leaf, public) in leaves {
                let named = leaf.last().is_some_and(|l| l == name || l == "*");
                if !public || !named {
                    continue;
                }
                let mut leaf = leaf.clone();
                if leaf.last().is_some_and(|l| l == "*") {
                    leaf.pop();
                    leaf.push(name.clone());
                }
                let found = self
                    .absolute(&file, &leaf)
                    .and_then(|target| self.resolve(&target, depth + 1));
                if found.is_some() {
                    return found;
                }
            }
            return Some(file);
        }
        None
    }

    fn graph(&self) -> Graph {
        let mut graph = Graph::new();
        for (file, code) in &self.code {
            let name = file
                .strip_prefix(&self.src)
                .expect("under src")
                .display()
                .to_string();
            let facade = file.ends_with("mod.rs");
            let (leaves, rest) = uses(code);
            // A facade's re-export counts when the facade uses the item itself.
            let used_here = |leaf: &[String]| {
                leaf.last().is_some_and(|name| {
                    rest.match_indices(name.as_str()).any(|(at, _)| {
                        let before = rest[..at].chars().next_back();
                        let after = rest[at + name.len()..].chars().next();
                        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
                    })
                })
            };
            let named = leaves
                .into_iter()
                .filter(|(leaf, public)| !(facade && *public) || used_here(leaf))
                .map(|(leaf, _)| leaf)
                .chain(paths_in(&rest));
            for path in named {
                let Some(target) = self
                    .absolute(file, &path)
                    .and_then(|absolute| self.resolve(&absolute, 0))
                else {
                    continue;
                };
                if &target != file {
                    let target = target.strip_prefix(&self.src).expect("under src");
                    graph
                        .entry(name.clone())
                        .or_default()
                        .entry(target.display().to_string())
                        .or_default()
                        .insert(path.join("::"));
                }
            }
        }
        graph
    }
}

/// The first cycle found in `graph`, each step with the names that make it.
fn first_cycle(graph: &Graph) -> Option<String> {
    graph.keys().find_map(|file| {
        let cycle = cycle_through(graph, file)?;
        let because: Vec<String> = cycle
            .windows(2)
            .map(|step| {
                format!(
                    "{} -> {} ({:?})",
                    step[0], step[1], graph[&step[0]][&step[1]]
                )
            })
            .collect();
        Some(format!("{}\n{}", cycle.join(" -> "), because.join("\n")))
    })
}

fn crate_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_file_of_the_crate_depends_on_itself_through_others() {
    let graph = Tree::read_all(&crate_src()).graph();
    assert!(graph.len() >= 120, "the crate was read: {}", graph.len());
    // The reader follows what it should: a value's logging reaches the guard's trait, a
    // path through the engine's re-exports reaches the file that defines it, and the routes
    // reach their handlers.
    let edge = |from: &str, to: &str| graph.get(from).is_some_and(|e| e.contains_key(to));
    assert!(edge("engine/logged.rs", "engine/guard.rs"), "{graph:#?}");
    assert!(edge("engine/queue/groups.rs", "engine/fast_map.rs"));
    assert!(edge("http/mod.rs", "http/inspect.rs"));
    assert!(edge("http/inspect.rs", "http/state.rs"));
    if let Some(cycle) = first_cycle(&graph) {
        panic!("a file cycle: {cycle}");
    }
}

#[test]
fn no_file_of_the_benchmark_depends_on_itself_through_others() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/src");
    let tree = Tree::read_all(&src);
    assert!(
        tree.code.len() >= 8,
        "the benchmark was read: {:?}",
        tree.code.keys()
    );
    let graph = tree.graph();
    assert!(
        graph["scenarios.rs"].contains_key("load.rs"),
        "the benchmark's paths were followed: {graph:?}"
    );
    if let Some(cycle) = first_cycle(&graph) {
        panic!("a file cycle in the benchmark: {cycle}");
    }
}

/// The check can fail: one `use` that makes a handler's shared state depend on a handler
/// closes a loop through the routes, and is found.
#[test]
fn a_cycle_planted_in_the_http_files_is_found() {
    let mut tree = Tree::read_all(&crate_src());
    let state = crate_src().join("http/state.rs");
    let code = tree.code.get_mut(&state).expect("http/state.rs is read");
    code.push_str("\nuse super::inspect::unauthorized;\n");
    let graph = tree.graph();
    let cycle = first_cycle(&graph).expect("the planted cycle is found");
    assert!(
        cycle.contains("http/state.rs -> http/inspect.rs"),
        "{cycle}"
    );
}

#[test]
fn use_trees_and_code_paths_are_read_as_leaves() {
    let (leaves, rest) = uses(
        "pub use a::{b, c::{d as e, f}};\nuse super::g::*;\nfn x() { let v = super::h::i(); }",
    );
    let leaves: Vec<(String, bool)> = leaves.into_iter().map(|(l, p)| (l.join("::"), p)).collect();
    assert_eq!(
        leaves,
        [
            ("a::b".into(), true),
            ("a::c::d".into(), true),
            ("a::c::f".into(), true),
            ("super::g::*".into(), false)
        ]
    );
    let paths: Vec<String> = paths_in(&rest).into_iter().map(|p| p.join("::")).collect();
    assert_eq!(paths, ["super::h::i"]);
    assert!(paths_in("pub(in crate::engine) x: u8").is_empty());
    let looped: Vec<String> = paths_in("for x in crate::worker::figures() {}")
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(looped, ["crate::worker::figures"]);
}

/// The part of the engine a file belongs to (`engine/topic/filter.rs`: `topic`,
/// `engine/queues.rs`: `queues`); `None` outside the engine and for its root, which composes
/// the parts.
fn engine_part(file: &str) -> Option<String> {
    let rest = file.strip_prefix("engine/")?;
    let part = rest.split('/').next()?.trim_end_matches(".rs");
    (part != "mod").then(|| part.to_string())
}

/// Which engine parts each one uses, from the file graph.
fn engine_parts(graph: &Graph) -> Graph {
    let mut parts = Graph::new();
    for (from, targets) in graph {
        let Some(from) = engine_part(from) else {
            continue;
        };
        for (to, names) in targets {
            match engine_part(to) {
                Some(to) if to != from => {
                    let known = parts
                        .entry(from.clone())
                        .or_default()
                        .entry(to)
                        .or_default();
                    known.extend(names.iter().cloned());
                }
                _ => {}
            }
        }
    }
    parts
}

/// The engine's parts (one queue, the queues, one topic, the topics, the webhook outbox, ...)
/// depend on each other one way: a part that needs another is above it, never beside it.
#[test]
fn the_engines_parts_depend_one_way() {
    let parts = engine_parts(&Tree::read_all(&crate_src()).graph());
    let edge = |from: &str, to: &str| parts.get(from).is_some_and(|e| e.contains_key(to));
    assert!(
        edge("topics", "webhooks") && edge("webhook", "topic"),
        "{parts:#?}"
    );
    assert!(
        edge("webhooks", "queues") && edge("queues", "queue"),
        "{parts:#?}"
    );
    if let Some(cycle) = first_cycle(&parts) {
        panic!("the engine's parts depend on each other: {cycle}");
    }
}

/// One `use` of the topics from the outbox's state makes two parts depend on each other.
#[test]
fn parts_planted_beside_each_other_are_found() {
    let mut tree = Tree::read_all(&crate_src());
    let outbox = crate_src().join("engine/webhook/outbox.rs");
    let code = tree
        .code
        .get_mut(&outbox)
        .expect("engine/webhook/outbox.rs is read");
    code.push_str("\nuse crate::engine::topics::Topics;\n");
    let cycle = first_cycle(&engine_parts(&tree.graph())).expect("the planted loop is found");
    assert!(cycle.contains("webhook -> topics"), "{cycle}");
}

/// The top-level module a file of the crate belongs to (`engine/queue/mod.rs`: `engine`).
fn top_level(file: &str) -> String {
    let first = file.split('/').next().expect("a component");
    first.trim_end_matches(".rs").to_string()
}

/// Which top-level modules each one uses, outside tests, from the file graph.
fn module_edges(graph: &Graph) -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut edges: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for (from, targets) in graph {
        for to in targets.keys() {
            let (from, to) = (top_level(from), top_level(to));
            if from != to {
                edges.entry(from).or_default().insert(to);
            }
        }
    }
    edges
}

/// The edges ARCHITECTURE.md lists: the lines `module -> a, b` of the block that follows its
/// heading `## Edges between modules`.
fn documented_edges(text: &str) -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let section = text
        .split("## Edges between modules")
        .nth(1)
        .expect("ARCHITECTURE.md has a section `## Edges between modules`");
    let block = section
        .split("```")
        .nth(1)
        .expect("the section holds a ``` block");
    block
        .lines()
        .filter_map(|line| line.split_once("->"))
        .map(|(from, to)| {
            let to = to.split(',').map(|m| m.trim().to_string());
            (
                from.trim().to_string(),
                to.filter(|m| !m.is_empty()).collect(),
            )
        })
        .collect()
}

#[test]
fn architecture_lists_the_real_edges_between_top_level_modules() {
    let graph = Tree::read_all(&crate_src()).graph();
    let real = module_edges(&graph);
    assert!(real.len() >= 10, "the crate's modules were read: {real:?}");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    let text = std::fs::read_to_string(path).expect("ARCHITECTURE.md is readable");
    let documented = documented_edges(&text);
    if documented != real {
        let width = real.keys().map(String::len).max().unwrap_or(0);
        let lines: Vec<String> = (real.iter())
            .map(|(from, to)| {
                let to: Vec<&str> = to.iter().map(String::as_str).collect();
                format!("{from:width$} -> {}", to.join(", "))
            })
            .collect();
        panic!(
            "ARCHITECTURE.md's edges are not the code's; the code's are:\n{}",
            lines.join("\n")
        );
    }
}

#[test]
fn documented_edges_are_read_from_their_block() {
    let text =
        "x\n## Edges between modules\n\nprose\n```\napp  -> engine, http\nhttp -> service\n```\n";
    let edges = documented_edges(text);
    assert_eq!(edges.len(), 2);
    assert_eq!(edges["app"].iter().collect::<Vec<_>>(), ["engine", "http"]);
    assert_eq!(top_level("engine/queue/mod.rs"), "engine");
    assert_eq!(top_level("config.rs"), "config");
}
