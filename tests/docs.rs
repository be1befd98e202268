//! The docs cannot drift: every relative link in `README.md`, `docs/` and `deploy/README.md`
//! resolves (the file exists, and an anchor names a heading of it); every code name
//! `docs/ARCHITECTURE.md` cites exists in `src/`: a file, a `function()`, a type, and every path
//! (`store::Lease`, `Proxy::join`, `limiter::budget::Budget`) resolved against the real module
//! tree (the files of `src/` mapped to module paths, the items each declares or re-exports, the
//! methods of `impl` blocks, variants and fields), with a signature written out held to the
//! function's; its Privacy line names exactly what `src/lib.rs` makes public; and the README's
//! config example is a config courtesy accepts. Plain text scanning, no parser crate.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

mod source_text;
use source_text::{code_only, module_of};

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

/// A token of Rust source as the item scan needs it: an identifier, `::`, or one other
/// character. Comments, literals and lifetimes are left out.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Path,
    Punct(char),
}

fn tokens(source: &str) -> Vec<Token> {
    let chars: Vec<char> = code_only(source).chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let at = |k: usize| chars.get(k).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '\'' {
            // A lifetime: the char literals are blanked already.
            i += 1;
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if !word.starts_with(|d: char| d.is_ascii_digit()) {
                out.push(Token::Ident(word));
            }
        } else if c == ':' && at(i + 1) == ':' {
            out.push(Token::Path);
            i += 2;
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

/// What the crate declares: the items of each module (by module path, `a::b` for `src/a/b.rs`
/// and `src/a/b/mod.rs`, inline modules included; what a module re-exports with `pub use`
/// counts as its item), and the members of each type wherever they are declared (the methods
/// and associated items of its `impl` blocks and of a trait's body, an enum's variants, a
/// struct's fields).
#[derive(Default)]
struct Declared {
    items: std::collections::BTreeMap<Vec<String>, HashSet<String>>,
    members: std::collections::BTreeMap<String, HashSet<String>>,
    /// Each function's signatures ([`signature`]), by `Type::function` or `module::function`.
    signatures: std::collections::BTreeMap<String, Vec<(Vec<String>, String)>>,
}

/// The kind of a `{ … }` block, as the scan follows it.
#[derive(Clone)]
enum Block {
    Module(Vec<String>),
    Members(String),
    Fields(String),
    Variants(String),
    Other,
}

/// The name of the type an `impl` block is for: after `for` if there is one, else after the
/// `impl`'s own generics; the last segment of its path.
fn impl_target(header: &[Token]) -> Option<String> {
    let mut rest = header;
    if let Some(k) = header.iter().position(|t| *t == Token::Ident("for".into())) {
        rest = &header[k + 1..];
    } else if rest.first() == Some(&Token::Punct('<')) {
        let mut depth = 0;
        let mut k = 0;
        for (j, t) in rest.iter().enumerate() {
            match t {
                Token::Punct('<') => depth += 1,
                Token::Punct('>') => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                k = j + 1;
                break;
            }
        }
        rest = &rest[k..];
    }
    let mut name = None;
    for t in rest {
        match t {
            Token::Ident(word) if word != "dyn" => name = Some(word.clone()),
            Token::Path | Token::Punct('&') => {}
            _ => break,
        }
    }
    name
}

/// The signature of a function whose `(` is at `tokens[open]`: each parameter's pattern
/// (`state`, `(egress,downlink)`; `self` and `mut` left out) and the return type, both without
/// spaces (`(Reaction,Option<JoinHandle<()>>)`; empty for none).
fn signature(tokens: &[Token], open: usize) -> (Vec<String>, String) {
    let text = |t: &Token| match t {
        Token::Ident(w) => w.clone(),
        Token::Path => "::".to_string(),
        Token::Punct(c) => c.to_string(),
    };
    let mut params = Vec::new();
    let mut pattern = String::new();
    let mut in_type = false;
    let mut depth = 0;
    let mut k = open;
    while k < tokens.len() {
        let t = &tokens[k];
        let arrow = k > 0 && tokens[k - 1] == Token::Punct('-');
        match t {
            Token::Punct('(' | '[' | '<') => depth += 1,
            Token::Punct(')' | ']') => depth -= 1,
            Token::Punct('>') if !arrow => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            break;
        }
        let top = depth == 1 && !matches!(t, Token::Punct('(' | '[' | '<')) || k == open;
        match t {
            _ if k == open => {}
            Token::Punct(',') if top => {
                if !pattern.is_empty() && pattern != "self" {
                    params.push(std::mem::take(&mut pattern));
                }
                pattern.clear();
                in_type = false;
            }
            Token::Punct(':') if top => in_type = true,
            Token::Ident(w) if w == "mut" => {}
            Token::Punct('&') if !in_type => {}
            _ if !in_type => pattern.push_str(&text(t)),
            _ => {}
        }
        k += 1;
    }
    if !pattern.is_empty() && pattern != "self" {
        params.push(pattern);
    }
    let mut returns = String::new();
    if tokens.get(k + 1) == Some(&Token::Punct('-'))
        && tokens.get(k + 2) == Some(&Token::Punct('>'))
    {
        for t in &tokens[k + 3..] {
            if matches!(t, Token::Punct('{' | ';')) || *t == Token::Ident("where".into()) {
                break;
            }
            returns.push_str(&text(t));
        }
    }
    (params, returns)
}

impl Declared {
    fn of_sources(sources: &[(PathBuf, String)]) -> Declared {
        let mut declared = Declared::default();
        let src = root().join("src");
        for (path, text) in sources {
            let module = module_of(path.strip_prefix(&src).unwrap());
            declared.items.entry(module.clone()).or_default();
            declared.scan(&tokens(text), module);
        }
        declared
    }

    fn item(&mut self, module: &[String], name: &str) {
        self.items
            .entry(module.to_vec())
            .or_default()
            .insert(name.to_string());
    }

    fn member(&mut self, owner: &str, name: &str) {
        self.members
            .entry(owner.to_string())
            .or_default()
            .insert(name.to_string());
    }

    fn scan(&mut self, tokens: &[Token], module: Vec<String>) {
        let ident = |k: usize| match tokens.get(k) {
            Some(Token::Ident(w)) => Some(w.as_str()),
            _ => None,
        };
        let mut stack: Vec<Block> = vec![Block::Module(module)];
        // What the next `{` opens, set by the keyword before it.
        let mut opens = Block::Other;
        let mut statement_start = 0;
        let mut brackets = 0;
        let mut last_struct: Option<String> = None;
        let mut k = 0;
        while k < tokens.len() {
            let here = stack.last().cloned().unwrap_or(Block::Other);
            match &tokens[k] {
                Token::Punct('[') => brackets += 1,
                Token::Punct(']') => {
                    brackets -= 1;
                    if brackets == 0 {
                        // An attribute ends: what follows starts the item it marks.
                        statement_start = k + 1;
                    }
                }
                Token::Punct('{') => {
                    let mut block = std::mem::replace(&mut opens, Block::Other);
                    // A macro's body at a module's level (`keys! { pub struct … }`) declares
                    // items of that module.
                    if k > 0 && tokens[k - 1] == Token::Punct('!') {
                        if let Block::Module(m) = &here {
                            block = Block::Module(m.clone());
                        }
                    }
                    // The fields that no key fills, after a `keys!` struct (`also { … }`).
                    if k > 0 && tokens[k - 1] == Token::Ident("also".into()) {
                        if let Some(name) = &last_struct {
                            block = Block::Fields(name.clone());
                        }
                    }
                    stack.push(block);
                    statement_start = k + 1;
                }
                Token::Punct('}') => {
                    stack.pop();
                    opens = Block::Other;
                    statement_start = k + 1;
                }
                Token::Punct(';') => {
                    opens = Block::Other;
                    statement_start = k + 1;
                }
                Token::Punct(',') => statement_start = k + 1,
                Token::Ident(word) if brackets == 0 => {
                    let next = ident(k + 1).map(str::to_string);
                    match (word.as_str(), &here) {
                        ("fn", Block::Module(_) | Block::Members(_)) => {
                            if let Some(name) = next {
                                let owner = match &here {
                                    Block::Members(t) => {
                                        self.member(t, &name);
                                        t.clone()
                                    }
                                    Block::Module(m) => {
                                        self.item(m, &name);
                                        m.last().cloned().unwrap_or_default()
                                    }
                                    _ => unreachable!(),
                                };
                                if let Some(open) =
                                    tokens[k..].iter().position(|t| *t == Token::Punct('('))
                                {
                                    self.signatures
                                        .entry(format!("{owner}::{name}"))
                                        .or_default()
                                        .push(signature(tokens, k + open));
                                }
                            }
                        }
                        (
                            "struct" | "enum" | "union" | "trait" | "type" | "static" | "mod"
                            | "const",
                            Block::Module(m),
                        ) if next.as_deref().is_some_and(|n| n != "fn" && n != "_") => {
                            let name = next.unwrap();
                            self.item(m, &name);
                            if word == "struct" {
                                last_struct = Some(name.clone());
                            }
                            opens = match word.as_str() {
                                "struct" | "union" => Block::Fields(name),
                                "enum" => Block::Variants(name),
                                "trait" => Block::Members(name),
                                "mod" => {
                                    let mut inner = m.clone();
                                    inner.push(name);
                                    Block::Module(inner)
                                }
                                _ => Block::Other,
                            };
                        }
                        ("const" | "type", Block::Members(t))
                            if next.as_deref().is_some_and(|n| n != "fn") =>
                        {
                            self.member(t, next.as_deref().unwrap());
                        }
                        ("macro_rules", Block::Module(m)) => {
                            if let Some(name) = ident(k + 2) {
                                self.item(m, name);
                            }
                        }
                        ("impl", Block::Module(_)) => {
                            let end = tokens[k..]
                                .iter()
                                .position(|t| *t == Token::Punct('{') || *t == Token::Punct(';'))
                                .map_or(tokens.len(), |e| k + e);
                            let header: Vec<Token> = tokens[k + 1..end]
                                .iter()
                                .take_while(|t| **t != Token::Ident("where".into()))
                                .cloned()
                                .collect();
                            if let Some(target) = impl_target(&header) {
                                opens = Block::Members(target);
                            }
                            k = end;
                            continue;
                        }
                        ("use", Block::Module(m))
                            if k > statement_start
                                && tokens[statement_start..k]
                                    .contains(&Token::Ident("pub".into())) =>
                        {
                            let end = tokens[k..]
                                .iter()
                                .position(|t| *t == Token::Punct(';'))
                                .map_or(tokens.len(), |e| k + e);
                            for (j, t) in tokens[k..end].iter().enumerate() {
                                if let Token::Ident(name) = t {
                                    let after = tokens.get(k + j + 1);
                                    if !matches!(after, Some(Token::Path))
                                        && name != "as"
                                        && name != "self"
                                    {
                                        self.item(m, name);
                                    }
                                }
                            }
                            k = end;
                            continue;
                        }
                        (_, Block::Fields(t))
                            if tokens.get(k + 1) == Some(&Token::Punct(':')) && word != "pub" =>
                        {
                            self.member(t, word);
                        }
                        (_, Block::Variants(t)) if k == statement_start => {
                            self.member(t, word);
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
            k += 1;
        }
    }

    /// Whether `segments` name a module of the crate, an item of one, or a member of an item:
    /// the leading segments are the end of a module's path (`limiter::budget` is
    /// `budget::limiter::budget`), the next an item declared in it, and one more a member of
    /// that item; or, with no module, an item of any module and one of its members.
    fn resolves(&self, segments: &[&str]) -> bool {
        let segments: Vec<String> = segments.iter().map(|s| s.to_string()).collect();
        let ends_with = |module: &Vec<String>, tail: &[String]| {
            module.len() >= tail.len() && module[module.len() - tail.len()..] == *tail
        };
        let member_of = |owner: &str, rest: &[String]| match rest {
            [] => true,
            [member] => self.members.get(owner).is_some_and(|m| m.contains(member)),
            _ => false,
        };
        for k in 0..=segments.len() {
            let (lead, rest) = segments.split_at(k);
            let modules: Vec<&Vec<String>> = if k == 0 {
                self.items.keys().collect()
            } else {
                self.items.keys().filter(|m| ends_with(m, lead)).collect()
            };
            if modules.is_empty() {
                break;
            }
            let Some((item, rest)) = rest.split_first() else {
                return true; // a module
            };
            if modules
                .iter()
                .any(|m| self.items[*m].contains(item) && member_of(item, rest))
            {
                return true;
            }
        }
        false
    }
}

/// The crates courtesy depends on, as paths spell them, and the standard library's.
fn external_crates() -> HashSet<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let mut crates: HashSet<String> = ["std", "core", "alloc"].map(String::from).into();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line.ends_with("dependencies]");
            continue;
        }
        if let Some((name, _)) = line.split_once('=').filter(|_| in_deps) {
            crates.insert(name.trim().replace('-', "_"));
        }
    }
    crates
}

/// The signature a code span writes, `f(a, (b, c)) -> T`, as [`signature`] makes it (no
/// spaces), if it writes one in plain names (not `f(…)` or `f(&x)`).
fn written_signature(span: &str) -> Option<(Vec<String>, Option<String>)> {
    let open = span.find('(')?;
    let mut depth = 0;
    let close = span[open..].char_indices().find_map(|(k, c)| {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        (depth == 0).then_some(open + k)
    })?;
    let inside = &span[open + 1..close];
    let mut params = Vec::new();
    let mut depth = 0;
    let mut param = String::new();
    for c in inside.chars().chain(std::iter::once(',')) {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                if !param.is_empty() {
                    params.push(std::mem::take(&mut param));
                }
                continue;
            }
            c if c.is_whitespace() => continue,
            _ => {}
        }
        param.push(c);
    }
    if !params
        .iter()
        .all(|p| p.chars().all(|c| c.is_alphanumeric() || "_(),".contains(c)))
    {
        return None;
    }
    let returns = span[close + 1..]
        .trim()
        .strip_prefix("->")
        .map(|r| r.chars().filter(|c| !c.is_whitespace()).collect());
    Some((params, returns))
}

#[test]
fn every_code_name_the_architecture_cites_exists() {
    let text = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let sources = sources();
    let declared = Declared::of_sources(&sources);
    let external = external_crates();
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
        // `module::Type::function(...)`, `Type::Variant`, `function()`, `Type`.
        let head = name.split('(').next().unwrap_or("").trim();
        let called = name.contains('(');
        if head.contains("::") {
            let segments: Vec<&str> = head
                .trim_start_matches("crate::")
                .trim_start_matches("courtesy::")
                .split("::")
                .collect();
            if !segments.iter().all(|s| is_ident(s)) || external.contains(segments[0]) {
                continue;
            }
            if !declared.resolves(&segments) {
                missing.push(format!("path {head} (in `{name}`)"));
                continue;
            }
            // A signature, where one is written: `Budget::report(host, state) -> Reaction`.
            if let Some((params, returns)) = written_signature(name) {
                let owner = segments[segments.len().saturating_sub(2)..].join("::");
                if let Some(known) = declared.signatures.get(&owner) {
                    let fits = known.iter().any(|(p, r)| {
                        *p == params && (returns.is_none() || returns.as_ref() == Some(r))
                    });
                    if !fits {
                        let (p, r) = &known[0];
                        missing.push(format!(
                            "signature `{name}`: the code has {head}({}){}",
                            p.join(", "),
                            if r.is_empty() {
                                String::new()
                            } else {
                                format!(" -> {r}")
                            }
                        ));
                    }
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

#[test]
fn the_item_scan_finds_modules_items_and_members() {
    let code = r#"
        pub(crate) use inner::{Alpha, beta as gamma};
        /// A doc with fn hidden() in it.
        pub struct Proxy<'a> { pub(crate) field: &'a str, other: u8 }
        enum Turn { Go, #[allow(dead_code)] NotNow(u8), Held { at: u8 } }
        impl<'a> Proxy<'a> { pub fn join(&self, a: u8, mut b: Vec<(u8, u8)>) -> u8 { let s = "fn nope"; 0 } }
        impl std::fmt::Display for Turn { fn fmt(&self) {} }
        mod inner { pub const fn beta() {} }
    "#;
    let mut declared = Declared::default();
    declared.scan(&tokens(code), vec!["proxy".to_string()]);
    for good in [
        &["proxy", "Proxy", "join"][..],
        &["Proxy", "field"],
        &["proxy", "Alpha"],
        &["proxy", "gamma"],
        &["Turn", "Held"],
        &["Turn", "NotNow"],
        &["Turn", "fmt"],
        &["proxy", "inner", "beta"],
        &["proxy"],
    ] {
        assert!(declared.resolves(good), "{good:?} resolves");
    }
    for bad in [
        &["proxy", "hidden"][..],
        &["Proxy", "nope"],
        &["Proxy", "join", "deeper"],
        &["shared", "Lease"],
        &["inner", "Alpha"],
    ] {
        assert!(!declared.resolves(bad), "{bad:?} does not resolve");
    }
    assert_eq!(
        declared.signatures["Proxy::join"],
        [(vec!["a".to_string(), "b".to_string()], "u8".to_string())]
    );
}

/// The public surface `src/lib.rs` declares: its `pub mod`s and the names its `pub use`s bring
/// to the top.
fn public_names() -> HashSet<String> {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let toks = tokens(&lib);
    let mut names = HashSet::new();
    for (k, t) in toks.iter().enumerate() {
        if *t == Token::Ident("pub".into()) && toks.get(k + 1) == Some(&Token::Ident("mod".into()))
        {
            if let Some(Token::Ident(name)) = toks.get(k + 2) {
                names.insert(name.clone());
            }
        }
    }
    let mut statement = Vec::new();
    for t in &toks {
        if *t == Token::Punct(';') {
            if statement.first() == Some(&Token::Ident("pub".into()))
                && statement.get(1) == Some(&Token::Ident("use".into()))
            {
                for (j, s) in statement.iter().enumerate() {
                    if let Token::Ident(name) = s {
                        if j > 1
                            && !matches!(statement.get(j + 1), Some(Token::Path))
                            && name != "as"
                        {
                            names.insert(name.clone());
                        }
                    }
                }
            }
            statement.clear();
        } else {
            statement.push(t.clone());
        }
    }
    names
}

/// The Privacy convention of `docs/ARCHITECTURE.md` names exactly what `src/lib.rs` makes public.
#[test]
fn the_privacy_line_names_the_public_surface() {
    let text = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let start = text
        .find("- **Privacy.**")
        .expect("docs/ARCHITECTURE.md has a Privacy convention");
    let rest = &text[start + 2..];
    let end = rest.find("\n- ").unwrap_or(rest.len());
    let line = &rest[..end];
    let named: HashSet<String> = code_spans(line)
        .into_iter()
        .filter(|s| is_ident(s))
        .collect();
    let public = public_names();
    assert!(
        public.len() >= 10,
        "lib.rs's public names are found: {public:?}"
    );
    let mut wrong: Vec<String> = named
        .difference(&public)
        .map(|n| format!("`{n}` is named public but src/lib.rs does not make it so"))
        .chain(
            public
                .difference(&named)
                .map(|n| format!("`{n}` is public in src/lib.rs but the Privacy line omits it")),
        )
        .collect();
    wrong.sort();
    assert!(
        wrong.is_empty(),
        "docs/ARCHITECTURE.md's Privacy line and src/lib.rs differ:\n{}",
        wrong.join("\n")
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
