//! BM25 ranking over callable catalog entries: identifier-aware tokenization, stopwords, light stemming and a
//! small table of query expansions.
//!
//! Not the exact-name shortcut or the limit policy (those live in `Catalog::search`). Invariant: ranking is a pure
//! function of the catalog and the query; ties break on the callable name, so equal inputs give equal output.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a: terms are short, trusted-length strings, and SipHash dominated index construction.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 { 0xcbf2_9ce4_8422_2325 } else { self.0 };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

use serde_json::Value;

const K1: f64 = 1.2;
const B: f64 = 0.75;
/// Weight of a term that only an expansion produced.
const EXPANSION_WEIGHT: f64 = 0.35;
/// Field weights: a word in the name says more than a word in a parameter description.
const NAME_WEIGHT: f64 = 3.0;
const LABEL_WEIGHT: f64 = 2.0;
const DESCRIPTION_WEIGHT: f64 = 1.0;
const PARAMETER_NAME_WEIGHT: f64 = 1.0;
const PARAMETER_DESCRIPTION_WEIGHT: f64 = 0.5;
const MAX_PARAMETER_DEPTH: usize = 4;

/// Words ending in `s` that are not plurals; sorted, for binary search.
const NOT_PLURAL: &[&str] = &[
    "access",
    "address",
    "alias",
    "always",
    "analysis",
    "atlas",
    "aws",
    "axis",
    "basis",
    "bias",
    "bus",
    "canvas",
    "chaos",
    "class",
    "cors",
    "css",
    "diagnosis",
    "dns",
    "gas",
    "gcs",
    "has",
    "https",
    "ios",
    "is",
    "its",
    "js",
    "kubernetes",
    "lens",
    "less",
    "macos",
    "ms",
    "news",
    "os",
    "plus",
    "postgres",
    "previous",
    "process",
    "progress",
    "redis",
    "series",
    "sms",
    "stats",
    "status",
    "success",
    "this",
    "thus",
    "ts",
    "various",
    "was",
    "yes",
];

/// Query expansions: a typed word also looks for these words, at reduced weight.
const EXPANSIONS: &[(&str, &[&str])] = &[
    ("look", &["search", "find", "get"]),
    ("lookup", &["search", "find", "get"]),
    ("find", &["search", "list", "get"]),
    ("search", &["find", "query"]),
    ("fetch", &["get", "read", "download"]),
    ("get", &["read", "fetch", "retrieve"]),
    ("retrieve", &["get", "read", "fetch"]),
    ("show", &["get", "list", "read"]),
    ("read", &["get", "open", "view"]),
    ("open", &["read", "get"]),
    ("write", &["create", "save", "update"]),
    ("save", &["write", "create", "store"]),
    ("create", &["add", "new", "post"]),
    ("make", &["create", "add"]),
    ("add", &["create", "post", "insert"]),
    ("post", &["create", "send", "add"]),
    ("send", &["post", "message"]),
    ("remove", &["delete"]),
    ("delete", &["remove"]),
    ("edit", &["update", "modify", "patch"]),
    ("modify", &["update", "edit", "patch"]),
    ("change", &["update", "edit"]),
    ("update", &["edit", "patch", "modify"]),
    ("list", &["search", "get", "all"]),
    ("browse", &["navigate", "web", "browser"]),
    ("web", &["browser", "url", "search"]),
    ("internet", &["web", "search"]),
    ("url", &["web", "navigate", "link"]),
    ("page", &["web", "navigate"]),
    ("file", &["path", "document"]),
    ("folder", &["directory", "dir"]),
    ("directory", &["folder", "dir"]),
    ("dir", &["directory", "folder"]),
    ("repo", &["repository"]),
    ("repository", &["repo"]),
    ("pr", &["pull", "request", "merge"]),
    ("mr", &["merge", "request"]),
    ("message", &["post", "send", "chat"]),
    ("chat", &["message", "slack"]),
    ("screenshot", &["screen", "capture", "image"]),
    ("sql", &["query", "database"]),
    ("database", &["query", "sql"]),
    ("db", &["database", "query", "sql"]),
    ("comment", &["review", "reply"]),
    ("run", &["execute", "exec"]),
    ("execute", &["run", "exec"]),
];

/// Calls `f` with each lowercase word of `text`: `snake_case`, `camelCase`, `kebab-case` and `HTTPServer` all
/// split into words. One reused buffer, no allocation per word.
pub fn for_each_word(text: &str, mut f: impl FnMut(&str)) {
    let mut word = String::with_capacity(32);
    for chunk in text.split(|c: char| !c.is_alphanumeric()) {
        if chunk.is_empty() {
            continue;
        }
        let mut chars = chunk.chars().peekable();
        let mut prev: Option<char> = None;
        while let Some(cur) = chars.next() {
            if let Some(p) = prev {
                let next_lower = chars.peek().is_some_and(|c| c.is_lowercase());
                let boundary = (p.is_lowercase() && cur.is_uppercase())
                    || (p.is_uppercase() && cur.is_uppercase() && next_lower)
                    || (p.is_alphabetic() && cur.is_numeric())
                    || (p.is_numeric() && cur.is_alphabetic());
                if boundary && !word.is_empty() {
                    f(&word);
                    word.clear();
                }
            }
            if cur.is_ascii() {
                word.push(cur.to_ascii_lowercase());
            } else {
                word.extend(cur.to_lowercase());
            }
            prev = Some(cur);
        }
        if !word.is_empty() {
            f(&word);
            word.clear();
        }
    }
}

/// Splits identifiers and prose into lowercase words (see [`for_each_word`]).
pub fn split_words(text: &str, out: &mut Vec<String>) {
    for_each_word(text, |w| out.push(w.to_owned()));
}

/// About seventy English stopwords; a `match` compiles to a length switch, far cheaper than a search per word.
fn is_stopword(word: &str) -> bool {
    matches!(
        word,
        "a" | "about"
            | "after"
            | "all"
            | "an"
            | "and"
            | "any"
            | "are"
            | "as"
            | "at"
            | "be"
            | "been"
            | "but"
            | "by"
            | "can"
            | "could"
            | "do"
            | "does"
            | "for"
            | "from"
            | "has"
            | "have"
            | "how"
            | "i"
            | "if"
            | "in"
            | "into"
            | "is"
            | "it"
            | "its"
            | "me"
            | "my"
            | "no"
            | "not"
            | "of"
            | "on"
            | "or"
            | "our"
            | "please"
            | "should"
            | "so"
            | "some"
            | "than"
            | "that"
            | "the"
            | "their"
            | "them"
            | "then"
            | "there"
            | "these"
            | "this"
            | "those"
            | "to"
            | "up"
            | "us"
            | "use"
            | "was"
            | "we"
            | "were"
            | "what"
            | "when"
            | "which"
            | "will"
            | "with"
            | "would"
            | "you"
            | "your"
    )
}

/// Light suffix stemming: `ies ing ed ly es er s e`, with final-consonant undoubling.
pub fn stem(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    stem_into(word, &mut out);
    out
}

fn stem_into(word: &str, out: &mut String) {
    out.clear();
    if word.len() <= 3 || !word.is_ascii() || (word.ends_with('s') && NOT_PLURAL.binary_search(&word).is_ok()) {
        out.push_str(word);
        return;
    }
    if let Some(s) = word.strip_suffix("ies") {
        out.push_str(s);
        out.push('y');
    } else {
        let mut stem = word;
        for suffix in ["ing", "ed", "ly", "es", "er", "s", "e"] {
            if let Some(s) = word.strip_suffix(suffix)
                && s.len() >= 3
            {
                stem = s;
                break;
            }
        }
        out.push_str(stem);
    }
    let bytes = out.as_bytes();
    let n = bytes.len();
    if n >= 4 && bytes[n - 1] == bytes[n - 2] && !b"aeiouslz".contains(&bytes[n - 1]) {
        out.pop();
    }
}

/// Calls `f` with each stemmed search term of `text`, stopwords dropped.
pub fn for_each_term(text: &str, mut f: impl FnMut(&str)) {
    let mut stemmed = String::with_capacity(32);
    for_each_word(text, |w| {
        if !is_stopword(w) {
            stem_into(w, &mut stemmed);
            f(&stemmed);
        }
    });
}

/// Tokenizes text into stemmed search terms, dropping stopwords.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_term(text, |t| out.push(t.to_owned()));
    out
}

/// One document's weighted length.
struct Doc {
    len: f64,
}

/// The inverted index over the catalog's callable entries (indexed like `Catalog::entries`).
pub struct SearchIndex {
    vocabulary: FastMap<String, u32>,
    docs: Vec<Doc>,
    /// Per term id: (document, weighted tf).
    postings: Vec<Vec<(u32, f64)>>,
    avg_len: f64,
}

/// The text a document is made of.
pub struct DocText<'a> {
    /// Callable name and tool name.
    pub names: [&'a str; 2],
    /// The label, when present.
    pub label: Option<&'a str>,
    /// The description.
    pub description: &'a str,
    /// The input schema, for parameter names and descriptions.
    pub parameters: &'a Value,
}

impl SearchIndex {
    /// Builds the index.
    pub fn build<'a>(docs: impl IntoIterator<Item = DocText<'a>>) -> SearchIndex {
        let mut index =
            SearchIndex { vocabulary: FastMap::default(), docs: Vec::new(), postings: Vec::new(), avg_len: 0.0 };
        let mut total = 0.0;
        for (doc_id, doc) in docs.into_iter().enumerate() {
            // Few distinct terms per document: a small vector beats a hash map here.
            let mut terms: Vec<(u32, f64)> = Vec::with_capacity(64);
            let mut len = 0.0;
            let mut add = |text: &str, weight: f64, index: &mut SearchIndex| {
                for_each_term(text, |term| {
                    let id = match index.vocabulary.get(term) {
                        Some(&id) => id,
                        None => {
                            let id = index.vocabulary.len() as u32;
                            index.vocabulary.insert(term.to_owned(), id);
                            id
                        }
                    };
                    match terms.iter_mut().find(|(t, _)| *t == id) {
                        Some(entry) => entry.1 += weight,
                        None => terms.push((id, weight)),
                    }
                    len += weight;
                });
            };
            add(doc.names[0], NAME_WEIGHT, &mut index);
            if doc.names[1] != doc.names[0] {
                add(doc.names[1], NAME_WEIGHT, &mut index);
            }
            if let Some(label) = doc.label {
                add(label, LABEL_WEIGHT, &mut index);
            }
            add(doc.description, DESCRIPTION_WEIGHT, &mut index);
            let mut params: Vec<(&str, f64)> = Vec::new();
            collect_parameters(doc.parameters, 0, &mut params);
            for (text, weight) in params {
                add(text, weight, &mut index);
            }
            index.postings.resize_with(index.vocabulary.len(), Vec::new);
            for &(term, tf) in &terms {
                index.postings[term as usize].push((doc_id as u32, tf));
            }
            total += len;
            index.docs.push(Doc { len });
        }
        index.avg_len = if index.docs.is_empty() { 1.0 } else { (total / index.docs.len() as f64).max(1.0) };
        index
    }

    /// Ranks documents for `query`; returns document indexes best first. `names` breaks ties.
    pub fn rank(&self, query: &str, names: &[&str]) -> Vec<usize> {
        // Typed terms at weight 1; expansion terms at a reduced weight unless the user typed them too.
        let mut weights: Vec<(u32, f64, bool)> = Vec::new();
        let push = |term: &str, weight: f64, typed: bool, weights: &mut Vec<(u32, f64, bool)>| {
            let Some(&id) = self.vocabulary.get(term) else { return };
            match weights.iter_mut().find(|(t, _, _)| *t == id) {
                Some(entry) => {
                    if weight > entry.1 {
                        entry.1 = weight;
                    }
                    entry.2 |= typed;
                }
                None => weights.push((id, weight, typed)),
            }
        };
        let mut raw = Vec::new();
        split_words(query, &mut raw);
        for word in raw.iter().filter(|w| !is_stopword(w)) {
            push(&stem(word), 1.0, true, &mut weights);
            if let Some((_, extra)) = EXPANSIONS.iter().find(|(w, _)| w == word) {
                for e in *extra {
                    push(&stem(e), EXPANSION_WEIGHT, false, &mut weights);
                }
            }
        }
        let n = self.docs.len() as f64;
        let mut scores: FastMap<u32, (f64, bool)> = FastMap::default();
        for &(term, weight, typed) in &weights {
            let postings = &self.postings[term as usize];
            let df = postings.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(doc, tf) in postings {
                let len = self.docs[doc as usize].len;
                let s = weight * idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / self.avg_len));
                let entry = scores.entry(doc).or_insert((0.0, false));
                entry.0 += s;
                entry.1 |= typed;
            }
        }
        let mut ranked: Vec<(u32, f64, bool)> = scores.into_iter().map(|(d, (s, t))| (d, s, t)).collect();
        ranked.sort_by(|a, b| {
            b.2.cmp(&a.2)
                .then_with(|| b.1.total_cmp(&a.1))
                .then_with(|| crate::names::locale_cmp(names[a.0 as usize], names[b.0 as usize]))
        });
        ranked.into_iter().map(|(d, _, _)| d as usize).collect()
    }

    /// Number of indexed documents.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether no document is indexed.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Whether a document contains a term (for tests of the tokenizer end to end).
    pub fn doc_has(&self, doc: usize, term: &str) -> bool {
        self.vocabulary.get(term).is_some_and(|&id| self.postings[id as usize].iter().any(|&(d, _)| d as usize == doc))
    }
}

fn collect_parameters<'a>(schema: &'a Value, depth: usize, out: &mut Vec<(&'a str, f64)>) {
    if depth >= MAX_PARAMETER_DEPTH {
        return;
    }
    let Some(obj) = schema.as_object() else { return };
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            out.push((name, PARAMETER_NAME_WEIGHT));
            if let Some(d) = prop.get("description").and_then(Value::as_str) {
                out.push((d, PARAMETER_DESCRIPTION_WEIGHT));
            }
            collect_parameters(prop, depth + 1, out);
        }
    }
    if let Some(items) = obj.get("items") {
        collect_parameters(items, depth + 1, out);
    }
}
