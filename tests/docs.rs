//! The docs cannot drift: every relative link in `README.md`, `docs/` and `deploy/README.md`
//! resolves (the file exists, and an anchor names a heading of it), and every code name
//! `docs/ARCHITECTURE.md` cites (a file under `src/`, a type, a `Type::function`, a
//! `function()`) exists in `src/`; and the README's config example is a config courtesy accepts.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` (recursively) whose name ends with `.ext`, sorted.
fn files_under(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_under(&path, ext));
        } else if path.extension().is_some_and(|e| e == ext) {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The Markdown files that make the project's documentation.
fn doc_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("deploy/README.md")];
    files.extend(files_under(&root.join("docs"), "md"));
    files
}

/// The lines of a Markdown text outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut in_fence = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                in_fence = !in_fence;
                return false;
            }
            !in_fence
        })
        .collect()
}

/// The links of a Markdown text outside code: `(target)` after `]`.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose_lines(text) {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            found.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    found
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings.
fn anchors(text: &str) -> HashSet<String> {
    prose_lines(text)
        .into_iter()
        .filter(|line| line.starts_with('#'))
        .map(|line| slug(line.trim_start_matches('#')))
        .collect()
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut broken = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match link.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", file.display()));
                continue;
            }
            if let (Some(anchor), true) = (anchor, target.extension().is_some_and(|e| e == "md")) {
                let headings = anchors(&std::fs::read_to_string(&target).unwrap());
                if !headings.contains(anchor) {
                    broken.push(format!("{}: {link} (no such heading)", file.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Every `.rs` file under `src/`, with its text.
fn sources() -> Vec<(PathBuf, String)> {
    files_under(&root().join("src"), "rs")
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            (path, text)
        })
        .collect()
}

/// The backticked spans of a Markdown text outside fenced code.
fn code_spans(text: &str) -> Vec<String> {
    prose_lines(text)
        .into_iter()
        .flat_map(|line| {
            let parts: Vec<&str> = line.split('`').collect();
            parts
                .into_iter()
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Whether a file whose path ends with `name` is under `dir`.
fn find_file(dir: &Path, name: &str) -> bool {
    let ext = name.rsplit('.').next().unwrap_or("");
    files_under(dir, ext)
        .iter()
        .any(|path| path.to_string_lossy().ends_with(&format!("/{name}")))
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

fn is_camel(s: &str) -> bool {
    is_ident(s)
        && s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.chars().any(|c| c.is_lowercase())
}

/// Whether `word` stands as a whole word in `text`.
fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

#[test]
fn every_code_name_the_architecture_cites_exists() {
    let text = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let sources = sources();
    let all: String = sources
        .iter()
        .map(|(_, t)| t.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let files: Vec<String> = sources
        .iter()
        .map(|(p, _)| {
            p.strip_prefix(root().join("src"))
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    let mut missing = Vec::new();
    for span in code_spans(&text) {
        let name = span.trim();
        // A file or folder of the crate: `limiter/shared.rs`, `shared/`, `main.rs`.
        if name.ends_with(".rs") && !name.contains(' ') && !name.contains('<') {
            let bare = name.trim_start_matches("src/");
            let elsewhere = ["benches", "tests"]
                .iter()
                .any(|d| find_file(&root().join(d), bare));
            if !elsewhere
                && !files
                    .iter()
                    .any(|f| f == bare || f.ends_with(&format!("/{bare}")))
            {
                missing.push(format!("file {name}"));
            }
            continue;
        }
        // `Type::function(...)`, `Type::Variant`, `function()`, `Type`.
        let head = name.split('(').next().unwrap_or("").trim();
        let called = name.contains('(');
        if head.contains("::") {
            let segments: Vec<&str> = head.split("::").collect();
            if !segments.iter().all(|s| is_ident(s)) {
                continue;
            }
            for (i, segment) in segments.iter().enumerate() {
                let last = i + 1 == segments.len();
                let found = if last && !is_camel(segment) {
                    // A function, or a field.
                    has_word(&all, &format!("fn {segment}"))
                        || all.contains(&format!(" {segment}: "))
                } else {
                    has_word(&all, segment)
                };
                if !found {
                    missing.push(format!("{segment} (in `{name}`)"));
                }
            }
        } else if called && is_ident(head) && head.contains('_') {
            if !has_word(&all, &format!("fn {head}")) {
                missing.push(format!("fn {head} (in `{name}`)"));
            }
        } else if is_camel(head) && head == name && !has_word(&all, head) {
            missing.push(format!("type {head}"));
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md cites names that src/ does not have:\n{}",
        missing.join("\n")
    );
}

/// Every TOML example in the README is a config courtesy accepts.
#[test]
fn the_readmes_config_examples_are_valid() {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut in_toml = false;
    let mut block = String::new();
    let mut checked = 0;
    for line in text.lines() {
        if !in_toml && line.trim_start() == "```toml" {
            in_toml = true;
            block.clear();
            continue;
        }
        if in_toml && line.trim_start().starts_with("```") {
            in_toml = false;
            let dir = std::env::temp_dir().join(format!("courtesy-docs-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(format!("readme-{checked}.toml"));
            std::fs::write(&path, &block).unwrap();
            if let Err(e) = courtesy::config::Config::load(&path) {
                panic!("a TOML example of the README is invalid:\n{block}\n{e}");
            }
            checked += 1;
            continue;
        }
        if in_toml {
            block.push_str(line);
            block.push('\n');
        }
    }
    assert!(checked >= 1, "the README has a config example");
}

/// `text`, or the file rewritten with it when `COURTESY_WRITE_DOCS=1`; a difference fails with
/// the first line that differs.
fn matches_or_write(path: &Path, made: &str) {
    let written = std::fs::read_to_string(path).unwrap_or_default();
    if written == made {
        return;
    }
    if std::env::var_os("COURTESY_WRITE_DOCS").is_some_and(|v| v == "1") {
        std::fs::write(path, made).unwrap();
        return;
    }
    let first = written
        .lines()
        .zip(made.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| written.lines().count().min(made.lines().count()));
    panic!(
        "{} is not what the key tables in src/config make (line {}: {:?}, made {:?}); \
         edit the tables and run COURTESY_WRITE_DOCS=1 cargo test --test docs",
        path.display(),
        first + 1,
        written.lines().nth(first).unwrap_or(""),
        made.lines().nth(first).unwrap_or("")
    );
}

/// `config/courtesy.toml` is made from the key tables: every key with its doc and its default,
/// as the code has it.
#[test]
fn the_default_config_file_is_made_from_the_key_tables() {
    let made = courtesy::config::reference::config_file();
    matches_or_write(&root().join("config/courtesy.toml"), &made);
    courtesy::config::Config::parse_in(&made, "courtesy.toml", &root().join("config"))
        .expect("the made file is valid");
}

/// The reference tables of `docs/configuration.md` (between its markers) are made from the key
/// tables.
#[test]
fn the_configuration_reference_is_made_from_the_key_tables() {
    use courtesy::config::reference::{markdown, BEGIN, END};
    let path = root().join("docs/configuration.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let (Some(start), Some(end)) = (text.find(BEGIN), text.find(END)) else {
        panic!("{} has no {BEGIN} … {END} markers", path.display());
    };
    let made = format!("{}{BEGIN}\n{}{}", &text[..start], markdown(), &text[end..]);
    matches_or_write(&path, &made);
}
