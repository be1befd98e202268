//! The house by layers: `src/` is one folder per layer, and a layer imports only from the layers
//! below it. The order is the table under "### Layers" in `docs/ARCHITECTURE.md`; `lib.rs`'s
//! module map lists the same layers in the same order, and `ls src/` shows exactly them.
//!
//! Read from the sources, not from the compiler: every `crate::` path (a `use`, a path in an
//! expression, a group `crate::{a, b::c}`) and every `super::` chain that climbs out of a layer,
//! with comments and string literals taken out first. A failure names the file and line.
//!
//! Inside a layer, the files import one way round too: every `crate::` and `super::` path is
//! followed to the file it names (the deepest module of the path; where that module only
//! re-exports the item, `pub use`, the file that defines it, so that a re-export hides no
//! cycle), and files that import each other round in a circle fail, the circle named with the
//! place of each step. A module declares its children (`a/mod.rs`, or `a.rs`, those in `a/`), so
//! its reaching into them is not counted (a child reaching up to it is); inline `#[cfg(test)]`
//! modules are left out.
//!
//! And no function in `src/` (tests included) is over 80 lines, from the line with `fn` to its
//! closing brace, braces counted in the code without comments and literals.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

mod source_text;
use source_text::{code_only, module_of};

/// The one file at the top of `src/` besides `lib.rs` and `main.rs`: property tests across the
/// parsers of every layer, compiled for tests only, so above all of them.
const TEST_ONLY_TOP: &str = "untrusted_input.rs";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The first column (a backticked name) of the table under `heading`, in order.
fn table_names(text: &str, heading: &str) -> Vec<String> {
    let Some(start) = text.find(heading) else {
        panic!("no {heading:?} section");
    };
    let mut names = Vec::new();
    for line in text[start + heading.len()..].lines() {
        let line = line.trim_start_matches("//!").trim();
        if line.starts_with('#') {
            break;
        }
        let Some(cell) = line.strip_prefix('|') else {
            if names.is_empty() {
                continue;
            }
            break;
        };
        let first = cell.split('|').next().unwrap_or("").trim();
        if let Some(name) = first
            .strip_prefix('`')
            .and_then(|n| n.strip_suffix("/`").or_else(|| n.strip_suffix('`')))
        {
            names.push(name.to_string());
        }
    }
    names
}

/// The documented order, bottom first.
fn documented_layers() -> Vec<String> {
    let text = fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap_or_default();
    let layers = table_names(&text, "### Layers");
    assert!(
        layers.len() >= 5,
        "docs/ARCHITECTURE.md's \"### Layers\" table lists the layers, bottom first: {layers:?}"
    );
    layers
}

/// Where the group whose `{` comes just before `inside` ends: the index of its `}` (or the end).
fn group_end(inside: &str) -> usize {
    let mut depth = 1;
    inside
        .char_indices()
        .find(|&(_, c)| {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            depth == 0
        })
        .map_or(inside.len(), |(k, _)| k)
}

/// The top-level items of a group's inside, split at the commas outside inner groups.
fn top_level(inside: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (k, c) in inside.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inside[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    items.push(&inside[start..]);
    items.retain(|item| !item.trim().is_empty());
    items
}

/// The first segment of every top-level item of a use group's inside: `a, b::c, d::{e}` → a, b, d.
fn group_heads(inside: &str) -> Vec<String> {
    top_level(inside)
        .into_iter()
        .map(|item| {
            item.trim()
                .split("::")
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .filter(|head| !head.is_empty())
        .collect()
}

fn ident_at(code: &str) -> String {
    code.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Every top-level module that `code` reaches through `crate::`, with the line it is on.
fn crate_paths(code: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("crate::") {
        let start = from + at;
        from = start + "crate::".len();
        // `$crate::` in a macro, or an identifier ending in `crate`.
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c == '$' || c.is_alphanumeric() || c == '_') {
            continue;
        }
        let line = code[..start].matches('\n').count() + 1;
        let rest = &code[from..];
        if let Some(inside) = rest.strip_prefix('{') {
            for head in group_heads(&inside[..group_end(inside)]) {
                found.push((head, line));
            }
        } else {
            found.push((ident_at(rest), line));
        }
    }
    found
}

/// Every top-level module that `code` in a file `depth` modules below the crate root reaches by
/// climbing with `super::` out of the crate's top level.
fn super_escapes(code: &str, depth: usize) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("super::") {
        let start = from + at;
        let before = code[..start].chars().next_back();
        let mut climbs = 0;
        let mut rest = &code[start..];
        while let Some(after) = rest.strip_prefix("super::") {
            climbs += 1;
            rest = after;
        }
        from = code.len() - rest.len();
        if before.is_some_and(|c| c == ':' || c.is_alphanumeric() || c == '_') {
            continue;
        }
        // A `mod tests` inside a file adds a level the count here cannot see; climbing past the
        // file's own depth is what leaves the layer, and only `depth` climbs reach the top.
        if climbs >= depth {
            let line = code[..start].matches('\n').count() + 1;
            found.push((ident_at(rest), line));
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// How many modules below the crate root the file's own module is: `src/a/mod.rs` is 1,
/// `src/a/b.rs` is 2, `src/a/b/mod.rs` is 2.
fn module_depth(relative: &Path) -> usize {
    let parts = relative.components().count();
    if relative.file_name().is_some_and(|n| n == "mod.rs") {
        parts - 1
    } else {
        parts
    }
}

#[test]
fn src_shows_the_documented_layers_and_lib_rs_maps_them_in_order() {
    let layers = documented_layers();
    let lib = fs::read_to_string(root().join("src/lib.rs")).unwrap_or_default();
    let mapped = table_names(&lib, "The layers");
    assert_eq!(
        mapped, layers,
        "lib.rs's map and docs/ARCHITECTURE.md's \"### Layers\" list the same layers in the same order"
    );
    let mut on_disk = BTreeSet::new();
    for entry in fs::read_dir(root().join("src"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().to_string();
        if entry.path().is_dir() {
            on_disk.insert(name);
        } else if !["lib.rs", "main.rs", TEST_ONLY_TOP].contains(&name.as_str()) {
            panic!("src/{name}: a file at the top of src/ belongs in one of the layers {layers:?}");
        }
    }
    let documented: BTreeSet<String> = layers.iter().cloned().collect();
    assert_eq!(
        on_disk, documented,
        "the folders of src/ are the documented layers"
    );
    for layer in &layers {
        assert!(
            lib.contains(&format!("mod {layer};")),
            "lib.rs declares the layer {layer}"
        );
    }
}

#[test]
fn every_import_goes_down_the_layers_and_there_are_no_cycles() {
    let layers = documented_layers();
    let rank: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .map(|(i, l)| (l.as_str(), i))
        .collect();
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut edges: BTreeMap<(usize, usize), String> = BTreeMap::new();
    let mut wrong = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap_or(file);
        let Some(layer) = relative
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().to_string())
        else {
            continue;
        };
        let Some(&from) = rank.get(layer.as_str()) else {
            continue; // lib.rs, main.rs, the test-only top file
        };
        let code = code_only(&fs::read_to_string(file).unwrap_or_default());
        let mut reached = crate_paths(&code);
        reached.extend(super_escapes(&code, module_depth(relative)));
        for (target, line) in reached {
            let Some(&to) = rank.get(target.as_str()) else {
                continue; // an item of lib.rs, or a name that is not a layer
            };
            let place = format!("src/{}:{line}", relative.display());
            if to > from {
                wrong.push(format!(
                    "{place}: {layer} imports {target}, a layer above it"
                ));
            }
            if to != from {
                edges.entry((from, to)).or_insert(place);
            }
        }
    }
    // A cycle between layers, named with one place per edge (the order check above already
    // refuses it; this says which way round it goes).
    for (&(a, b), place) in &edges {
        if let Some(back) = edges.get(&(b, a)).filter(|_| a < b) {
            wrong.push(format!(
                "a cycle: {} → {} ({place}) and back ({back})",
                layers[a], layers[b]
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layer order of docs/ARCHITECTURE.md:\n{}",
        wrong.join("\n")
    );
    assert!(
        edges.len() >= layers.len(),
        "the scan found the imports between layers ({} edges)",
        edges.len()
    );
}

#[test]
fn the_scanner_sees_through_groups_comments_and_strings() {
    let code = code_only(
        "use crate::{alpha::X, beta, gamma::{d, e}};\n// crate::delta\nlet s = \"crate::epsilon\";\nlet c = '\"'; crate::zeta::f();\n/* crate::eta */ r#\"crate::theta\"#; $crate::iota",
    );
    let found: Vec<String> = crate_paths(&code).into_iter().map(|(m, _)| m).collect();
    assert_eq!(found, ["alpha", "beta", "gamma", "zeta"]);
    assert_eq!(crate_paths(&code)[3].1, 4, "line numbers stay true");
    let escapes = super_escapes(&code_only("use super::super::omega; use super::near;"), 2);
    assert_eq!(escapes, [("omega".to_string(), 1)]);
}

/// `code` with every `#[cfg(test)]` inline module blanked (newlines kept): a file's tests may
/// import what the file itself is imported by.
fn without_test_modules(code: &str) -> String {
    let mut out = code.to_string();
    let mut from = 0;
    while let Some(at) = out[from..].find("#[cfg(test)]") {
        let start = from + at;
        from = start + "#[cfg(test)]".len();
        let rest = out[from..].trim_start();
        let rest = rest
            .strip_prefix("pub(crate)")
            .or_else(|| rest.strip_prefix("pub(super)"))
            .unwrap_or(rest)
            .trim_start();
        let Some(after_mod) = rest.strip_prefix("mod ") else {
            continue;
        };
        let after_name = after_mod[ident_at(after_mod).len()..].trim_start();
        if !after_name.starts_with('{') {
            continue; // `mod tests;`: a file of its own
        }
        let inside = out.len() - after_name.len() + 1;
        let end = (inside + group_end(&out[inside..]) + 1).min(out.len());
        let blanked: String = out[start..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(start..end, &blanked);
        from = end;
    }
    out
}

/// Every path a use tree starting at `rest` names, expanded: `a::{b, c::{d, e}}` → `a::b`,
/// `a::c::d`, `a::c::e` (each as its segments; `*`, `self` and an alias end a path).
fn use_tree(rest: &str) -> Vec<Vec<String>> {
    let mut segments = Vec::new();
    let mut rest = rest;
    loop {
        rest = rest.trim_start();
        if let Some(inside) = rest.strip_prefix('{') {
            let mut paths = Vec::new();
            for item in top_level(&inside[..group_end(inside)]) {
                for tail in use_tree(item) {
                    let mut path = segments.clone();
                    path.extend(tail);
                    paths.push(path);
                }
            }
            return paths;
        }
        let ident = ident_at(rest);
        if ident.is_empty() {
            return vec![segments];
        }
        rest = &rest[ident.len()..];
        segments.push(ident);
        match rest.trim_start().strip_prefix("::") {
            Some(after) => rest = after,
            None => return vec![segments],
        }
    }
}

/// Every path in `code` that starts at `crate::` or climbs with `super::`, as (the module it
/// starts from, its segments, its line). `module` is the file's own module path. A visibility
/// (`pub(in crate::config)`) names no import.
fn module_paths(code: &str, module: &[String]) -> Vec<(Vec<String>, Vec<String>, usize)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..]
        .find("crate::")
        .into_iter()
        .chain(code[from..].find("super::"))
        .min()
    {
        let start = from + at;
        let before = code[..start].chars().next_back();
        let mut rest = &code[start..];
        let base: Vec<String> = if let Some(after) = rest.strip_prefix("crate::") {
            rest = after;
            Vec::new()
        } else {
            let mut climbs = 0;
            while let Some(after) = rest.strip_prefix("super::") {
                climbs += 1;
                rest = after;
            }
            module[..module.len().saturating_sub(climbs)].to_vec()
        };
        from = code.len() - rest.len();
        if before.is_some_and(|c| c == '$' || c == ':' || c.is_alphanumeric() || c == '_')
            || code[..start].trim_end().ends_with("(in")
        {
            continue;
        }
        let line = code[..start].matches('\n').count() + 1;
        for path in use_tree(rest) {
            found.push((base.clone(), path, line));
        }
    }
    found
}

/// The cycles among `edges` (file → file → where), each as one closed walk `a → b → … → a`
/// with the place of each step; one per strongly connected set of files.
fn file_cycles(edges: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<String> {
    // Each file's reach, then the knots: files that reach each other (a few hundred files).
    fn reach(from: &str, edges: &BTreeMap<String, BTreeMap<String, String>>) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(node) = stack.pop() {
            for next in edges.get(&node).into_iter().flat_map(|m| m.keys()) {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    }
    let reachable: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|k| (k, reach(k, edges))).collect();
    let mut done = BTreeSet::new();
    let mut cycles = Vec::new();
    for (node, reached) in &reachable {
        if done.contains(*node) || !reached.contains(*node) {
            continue;
        }
        let knot: BTreeSet<String> = reached
            .iter()
            .filter(|other| reachable.get(other).is_some_and(|r| r.contains(*node)))
            .cloned()
            .collect();
        done.extend(knot.iter().cloned());
        // The shortest way from `node` back to itself, inside the knot.
        let mut previous: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([(*node).clone()]);
        'search: while let Some(at) = queue.pop_front() {
            for next in edges.get(&at).into_iter().flat_map(|m| m.keys()) {
                if !knot.contains(next) || previous.contains_key(next) {
                    continue;
                }
                previous.insert(next.clone(), at.clone());
                if next == *node {
                    break 'search;
                }
                queue.push_back(next.clone());
            }
        }
        let mut walk = vec![(*node).clone()];
        let mut at = previous[*node].clone();
        while at != **node {
            walk.push(at.clone());
            at = previous[&at].clone();
        }
        walk.push((*node).clone());
        walk.reverse();
        let steps: Vec<String> = walk
            .windows(2)
            .map(|w| format!("{} → {} ({})", w[0], w[1], edges[&w[0]][&w[1]]))
            .collect();
        cycles.push(format!(
            "a file cycle among {}: {}",
            knot.iter().cloned().collect::<Vec<_>>().join(", "),
            steps.join("; ")
        ));
    }
    cycles
}

/// What each module re-exports (`pub use`, `pub(crate) use`, `pub(super) use`, `pub(in …) use`),
/// by name: the path from the crate root that the name stands for. Paths start at `crate::`,
/// `self::`, `super::` or (the edition's default) the module itself. A glob (`a::*`) reads as
/// naming `a` itself, which adds nothing to follow; an alias (`as`) is not read (`src/` has
/// none).
fn re_exports(code: &str, module: &[String]) -> BTreeMap<String, Vec<String>> {
    let mut found = BTreeMap::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("use ") {
        let start = from + at;
        from = start + "use ".len();
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        // The statement's words before `use`: a visibility, perhaps after attributes.
        let head = code[..start]
            .rsplit([';', '{', '}'])
            .next()
            .unwrap_or("")
            .trim();
        let public = head.ends_with("pub") || (head.ends_with(')') && head.contains("pub("));
        if !public {
            continue;
        }
        for path in use_tree(&code[from..]) {
            let mut segments = path.as_slice();
            let mut base = module.to_vec();
            match segments.first().map(String::as_str) {
                Some("crate") => {
                    base.clear();
                    segments = &segments[1..];
                }
                Some("self") => segments = &segments[1..],
                _ => {
                    while segments.first().is_some_and(|s| s == "super") {
                        base.pop();
                        segments = &segments[1..];
                    }
                }
            }
            if let Some(name) = segments.last() {
                let mut full = base;
                full.extend(segments.iter().cloned());
                found.insert(name.clone(), full);
            }
        }
    }
    found
}

/// The module a path from `base` names: the deepest module of the crate it reaches; where that
/// module only re-exports the next segment (`pub use`), the module that defines it, followed
/// through chains of re-exports (a few steps at most).
fn resolve(
    modules: &BTreeMap<Vec<String>, String>,
    exports: &BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
    base: Vec<String>,
    path: &[String],
) -> Vec<String> {
    let mut target = base;
    let mut rest = path.to_vec();
    for _ in 0..8 {
        let mut k = 0;
        while let Some(segment) = rest.get(k) {
            let mut deeper = target.clone();
            deeper.push(segment.clone());
            if !modules.contains_key(&deeper) {
                break;
            }
            target = deeper;
            k += 1;
        }
        let Some(full) = rest.get(k).and_then(|name| exports.get(&target)?.get(name)) else {
            break;
        };
        // A re-export of something outside the crate (`pub use tokio::…`) names no file of it.
        if !full
            .first()
            .is_some_and(|first| modules.contains_key(&vec![first.clone()]))
        {
            break;
        }
        let mut next = full.clone();
        next.extend(rest[k + 1..].iter().cloned());
        target = Vec::new();
        rest = next;
    }
    target
}

/// The imports between files of one layer (file → file → where): every `crate::` and `super::`
/// path of each file (tests left out) followed to the file it names, through re-exports. `sources`
/// are the files' paths under `src/` with their code (comments and strings already taken out).
fn file_edges(sources: &[(PathBuf, String)]) -> BTreeMap<String, BTreeMap<String, String>> {
    let modules: BTreeMap<Vec<String>, String> = sources
        .iter()
        .map(|(relative, _)| (module_of(relative), relative.display().to_string()))
        .collect();
    let exports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = sources
        .iter()
        .map(|(relative, code)| {
            let module = module_of(relative);
            let found = re_exports(code, &module);
            (module, found)
        })
        .collect();
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (relative, code) in sources {
        let module = module_of(relative);
        let name = relative.display().to_string();
        for (base, path, line) in module_paths(code, &module) {
            let target = resolve(&modules, &exports, base, &path);
            let Some(to) = modules.get(&target) else {
                continue;
            };
            let same_layer = !module.is_empty() && target.first() == module.first();
            // A module declares its children (`a/mod.rs` or `a.rs` those in `a/`): reaching into
            // them is not an import that can close a circle (the child reaching back up is).
            let own_child = target.starts_with(&module);
            if *to != name && same_layer && !own_child {
                edges
                    .entry(name.clone())
                    .or_default()
                    .entry(to.clone())
                    .or_insert(format!("src/{name}:{line}"));
            }
        }
    }
    edges
}

#[test]
fn no_file_cycles_inside_a_layer() {
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let sources: Vec<(PathBuf, String)> = files
        .iter()
        .map(|file| {
            let relative = file.strip_prefix(&src).unwrap_or(file).to_path_buf();
            let text = fs::read_to_string(file).unwrap_or_default();
            (relative, without_test_modules(&code_only(&text)))
        })
        .collect();
    let edges = file_edges(&sources);
    let cycles = file_cycles(&edges);
    assert!(
        cycles.is_empty(),
        "files of one layer import each other round in a circle:\n{}",
        cycles.join("\n")
    );
    assert!(
        edges.values().map(BTreeMap::len).sum::<usize>() > 100,
        "the scan found the imports between files"
    );
}

#[test]
fn the_file_scanner_expands_trees_and_finds_cycles() {
    let code = without_test_modules(&code_only(
        "use super::{a::X, b::{c, d::E}};\nuse crate::q::r;\n#[cfg(test)]\nmod tests {\n    use super::super::z;\n}\npub(in crate::x) fn f() {}",
    ));
    let module = vec!["m".to_string(), "n".to_string()];
    let found: Vec<(Vec<String>, Vec<String>, usize)> = module_paths(&code, &module);
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        found,
        [
            (strings(&["m"]), strings(&["a", "X"]), 1),
            (strings(&["m"]), strings(&["b", "c"]), 1),
            (strings(&["m"]), strings(&["b", "d", "E"]), 1),
            (Vec::new(), strings(&["q", "r"]), 2),
        ]
    );
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        edges
            .entry(a.to_string())
            .or_default()
            .insert(b.to_string(), format!("{a}:1"));
    }
    let cycles = file_cycles(&edges);
    assert_eq!(
        cycles,
        ["a file cycle among a, b, c: a → b (a:1); b → c (b:1); c → a (c:1)"]
    );
}

#[test]
fn the_file_scanner_sees_through_re_exports() {
    // `host.rs` names `Permit` through its parent's re-export; `permit.rs` names `host.rs`
    // directly: one cycle, though no file names the other's path in full. `Host` comes back
    // through a chain of two re-exports, and a re-export from outside the crate names no file.
    let sources: Vec<(PathBuf, String)> = [
        (
            "lay/mod.rs",
            "mod inner;\npub use inner::Host;\npub use tokio::Notify;\n",
        ),
        (
            "lay/inner/mod.rs",
            "mod host;\nmod permit;\n#[doc(hidden)]\npub(crate) use permit::{Other, Permit};\npub use self::host::Host;\n",
        ),
        (
            "lay/inner/host.rs",
            "use super::Permit;\nuse crate::lay::Notify;\npub struct Host;\n",
        ),
        (
            "lay/inner/permit.rs",
            "use crate::lay::Host;\npub struct Permit;\n",
        ),
    ]
    .into_iter()
    .map(|(path, code)| (PathBuf::from(path), code_only(code)))
    .collect();
    let edges = file_edges(&sources);
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let of = |file: &str| -> Vec<String> {
        edges
            .get(file)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(
        of("lay/inner/host.rs"),
        strings(&["lay/inner/permit.rs", "lay/mod.rs"])
    );
    assert_eq!(of("lay/inner/permit.rs"), strings(&["lay/inner/host.rs"]));
    assert_eq!(
        file_cycles(&edges),
        ["a file cycle among lay/inner/host.rs, lay/inner/permit.rs: lay/inner/host.rs → lay/inner/permit.rs (src/lay/inner/host.rs:1); lay/inner/permit.rs → lay/inner/host.rs (src/lay/inner/permit.rs:1)"]
    );
}

/// The longest a function may be, from the line with `fn` to the line of its closing brace.
const MAX_FUNCTION_LINES: usize = 80;

/// Every function with a body in `code` (already `code_only`: no comments or literals), as (its
/// name, the line of its `fn`, its length in lines from that line to its closing brace). A
/// declaration without a body (`fn f();`) and a function pointer type (`fn(u8) -> u8`) are none.
fn function_spans(code: &str) -> Vec<(String, usize, usize)> {
    let bytes = code.as_bytes();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("fn") {
        let start = from + at;
        from = start + 2;
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `Fn`, `dyn_fn`, …
        }
        let rest = &code[from..];
        let name = ident_at(rest.trim_start());
        if name.is_empty() || !rest.starts_with(char::is_whitespace) {
            continue; // `fn(…)`, `fn_name`, `fn $name` in a macro
        }
        // The body opens at the first `{` outside the signature's brackets; a `;` there first
        // ends a declaration.
        let mut depth = 0i32;
        let mut open = None;
        for (k, &b) in bytes.iter().enumerate().skip(from) {
            match b {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b'{' if depth == 0 => {
                    open = Some(k);
                    break;
                }
                b';' if depth == 0 => break,
                _ => {}
            }
        }
        let Some(open) = open else {
            continue;
        };
        let close = open + 1 + group_end(&code[open + 1..]);
        spans.push((name, line_of(start), line_of(close) - line_of(start) + 1));
    }
    spans
}

#[test]
fn no_function_in_src_is_over_80_lines() {
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut long = Vec::new();
    let mut seen = 0;
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap_or(file);
        let code = code_only(&fs::read_to_string(file).unwrap_or_default());
        for (name, line, lines) in function_spans(&code) {
            seen += 1;
            if lines > MAX_FUNCTION_LINES {
                long.push(format!(
                    "src/{}:{line}: fn {name} is {lines} lines",
                    relative.display()
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines (from the `fn` line to the closing brace); \
         split them by meaning into named helpers:\n{}",
        long.join("\n")
    );
    assert!(seen > 1000, "the scan found the functions ({seen})");
}

#[test]
fn the_function_scanner_counts_from_fn_to_its_closing_brace() {
    let code = code_only(
        "pub(crate) async fn outer<'a, T: Fn(u8) -> u8>(x: &'a [u8; 4]) -> Result<(), ()>\nwhere\n    T: Copy,\n{\n    let s = \"}\"; let r = r#\"{\"#;\n    let c = '{';\n    // }\n    fn inner() { let f: fn(u8) = g; }\n    /* { */ Ok(())\n}\ntrait T { fn declared(&self); fn with_default(&self) {\n} }\nlet call = dyn_fn(1);",
    );
    assert_eq!(
        function_spans(&code),
        [
            ("outer".to_string(), 1, 10),
            ("inner".to_string(), 8, 1),
            ("with_default".to_string(), 11, 2),
        ]
    );
}
