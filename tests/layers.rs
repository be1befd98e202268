//! The house by layers: `src/` is one folder per layer, and a layer imports only from the layers
//! below it. The order is the table under "### Layers" in `docs/ARCHITECTURE.md`; `lib.rs`'s
//! module map lists the same layers in the same order, and `ls src/` shows exactly them.
//!
//! Read from the sources, not from the compiler: every `crate::` path (a `use`, a path in an
//! expression, a group `crate::{a, b::c}`) and every `super::` chain that climbs out of a layer,
//! with comments and string literals taken out first. A failure names the file and line.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

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

/// `source` with comments, string literals and char literals blanked out (newlines kept, so
/// that line numbers stay true).
fn code_only(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let blank = |out: &mut String, chunk: &[u8]| {
        for &b in chunk {
            out.push(if b == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = 0;
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if rest.starts_with(b"r\"") || rest.starts_with(b"r#") {
            let hashes = rest[1..].iter().take_while(|&&b| b == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let mut closing = vec![b'"'];
            closing.extend(std::iter::repeat_n(b'#', hashes));
            let body = 2 + hashes;
            let end = rest[body..]
                .windows(closing.len())
                .position(|w| w == closing.as_slice())
                .map_or(rest.len(), |p| body + p + closing.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'\'' && (rest.get(2) == Some(&b'\'') || (rest.get(1) == Some(&b'\\')))
        {
            // A char literal ('"', '\'', '\\', '\u{1F}'); a lifetime has no closing quote.
            let end = if rest[1] == b'\\' {
                rest.iter()
                    .skip(3)
                    .position(|&b| b == b'\'')
                    .map_or(rest.len(), |k| k + 4)
            } else {
                3
            };
            blank(&mut out, &rest[..end]);
            i += end;
        } else {
            // Keep multi-byte characters whole.
            let ch_len = source[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&source[i..i + ch_len]);
            i += ch_len;
        }
    }
    out
}

/// The first segment of every top-level item of a use group's inside: `a, b::c, d::{e}` → a, b, d.
fn group_heads(inside: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item = String::new();
    for c in inside.chars().chain(std::iter::once(',')) {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                let head = item
                    .trim()
                    .split("::")
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_string();
                if !head.is_empty() {
                    heads.push(head);
                }
                item.clear();
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    heads
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
            let mut depth = 1;
            let end = inside
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(inside.len(), |(k, _)| k);
            for head in group_heads(&inside[..end]) {
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
