//! BM25 ranking over callable catalog entries: identifier-aware tokenization, stopwords, light stemming and a
//! small table of query expansions.
//!
//! Not the exact-name shortcut or the limit policy (those live in `Catalog::search`). Invariant: ranking is a pure
//! function of the catalog and the query; ties break on the callable name, so equal inputs give equal output.

use std::collections::HashMap;

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

const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "an", "and", "any", "are", "as", "at", "be", "been", "but", "by", "can", "could",
    "do", "does", "for", "from", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no",
    "not", "of", "on", "or", "our", "please", "should", "so", "some", "than", "that", "the", "their", "them", "then",
    "there", "these", "this", "those", "to", "up", "us", "use", "was", "we", "were", "what", "when", "which", "will",
    "with", "would", "you", "your",
];

/// Words ending in `s` that are not plurals.
const NOT_PLURAL: &[&str] = &[
    "access",
    "address",
    "alias",
    "analysis",
    "bias",
    "bus",
    "canvas",
    "class",
    "process",
    "progress",
    "status",
    "success",
    "news",
    "https",
    "always",
    "atlas",
    "basis",
    "chaos",
    "cors",
    "dns",
    "gas",
    "lens",
    "less",
    "plus",
    "previous",
    "series",
    "sms",
    "this",
    "was",
    "has",
    "is",
    "its",
    "yes",
    "axis",
    "diagnosis",
    "thus",
    "various",
    "aws",
    "gcs",
    "postgres",
    "kubernetes",
    "redis",
    "os",
    "ios",
    "macos",
    "js",
    "ts",
    "css",
    "ms",
    "stats",
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

/// Splits identifiers and prose into lowercase words: `snake_case`, `camelCase`, `kebab-case`, `HTTPServer`.
pub fn split_words(text: &str, out: &mut Vec<String>) {
    for chunk in text.split(|c: char| !c.is_alphanumeric()) {
        if chunk.is_empty() {
            continue;
        }
        let chars: Vec<char> = chunk.chars().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let (prev, cur) = (chars[i - 1], chars[i]);
            let next_lower = chars.get(i + 1).is_some_and(|c| c.is_lowercase());
            let boundary = (prev.is_lowercase() && cur.is_uppercase())
                || (prev.is_uppercase() && cur.is_uppercase() && next_lower)
                || (prev.is_alphabetic() && cur.is_numeric())
                || (prev.is_numeric() && cur.is_alphabetic());
            if boundary {
                out.push(chars[start..i].iter().collect::<String>().to_lowercase());
                start = i;
            }
        }
        out.push(chars[start..].iter().collect::<String>().to_lowercase());
    }
}

/// Light suffix stemming: `ies ing ed ly es er s e`, with final-consonant undoubling.
pub fn stem(word: &str) -> String {
    if word.len() <= 3 || NOT_PLURAL.contains(&word) || !word.is_ascii() {
        return word.to_owned();
    }
    let mut stem = if let Some(s) = word.strip_suffix("ies") {
        format!("{s}y")
    } else {
        let mut out = word.to_owned();
        for suffix in ["ing", "ed", "ly", "es", "er", "s", "e"] {
            if let Some(s) = word.strip_suffix(suffix)
                && s.len() >= 3
            {
                out = s.to_owned();
                break;
            }
        }
        out
    };
    let bytes = stem.as_bytes();
    let n = bytes.len();
    if n >= 4 && bytes[n - 1] == bytes[n - 2] && !b"aeiouslz".contains(&bytes[n - 1]) {
        stem.pop();
    }
    stem
}

/// Tokenizes text into stemmed search terms, dropping stopwords.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    split_words(text, &mut words);
    words.into_iter().filter(|w| !STOPWORDS.contains(&w.as_str())).map(|w| stem(&w)).collect()
}

/// One document's weighted term frequencies and length.
struct Doc {
    terms: HashMap<u32, f64>,
    len: f64,
}

/// The inverted index over the catalog's callable entries (indexed like `Catalog::entries`).
pub struct SearchIndex {
    vocabulary: HashMap<String, u32>,
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
            SearchIndex { vocabulary: HashMap::new(), docs: Vec::new(), postings: Vec::new(), avg_len: 0.0 };
        let mut total = 0.0;
        for (doc_id, doc) in docs.into_iter().enumerate() {
            let mut terms: HashMap<u32, f64> = HashMap::new();
            let mut len = 0.0;
            let mut add = |text: &str, weight: f64, index: &mut SearchIndex| {
                for term in tokenize(text) {
                    let next = index.vocabulary.len() as u32;
                    let id = *index.vocabulary.entry(term).or_insert(next);
                    *terms.entry(id).or_insert(0.0) += weight;
                    len += weight;
                }
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
            for (&term, &tf) in &terms {
                index.postings[term as usize].push((doc_id as u32, tf));
            }
            total += len;
            index.docs.push(Doc { terms, len });
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
        for word in raw.iter().filter(|w| !STOPWORDS.contains(&w.as_str())) {
            push(&stem(word), 1.0, true, &mut weights);
            if let Some((_, extra)) = EXPANSIONS.iter().find(|(w, _)| w == word) {
                for e in *extra {
                    push(&stem(e), EXPANSION_WEIGHT, false, &mut weights);
                }
            }
        }
        let n = self.docs.len() as f64;
        let mut scores: HashMap<u32, (f64, bool)> = HashMap::new();
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
            b.2.cmp(&a.2).then_with(|| b.1.total_cmp(&a.1)).then_with(|| names[a.0 as usize].cmp(names[b.0 as usize]))
        });
        ranked.into_iter().map(|(d, _, _)| d as usize).collect()
    }

    /// Number of indexed documents.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether a document contains a term (for tests of the tokenizer end to end).
    pub fn doc_has(&self, doc: usize, term: &str) -> bool {
        self.vocabulary.get(term).is_some_and(|id| self.docs.get(doc).is_some_and(|d| d.terms.contains_key(id)))
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
