//! The quick index embedded in the exec description: hinted lines, then a compact tier of bare callable names.
//!
//! Not the description around it (that is `codemode-surface`). Invariant: the text never exceeds its character
//! budget, and `named + omitted` equals the number of callable entries.

use serde::Serialize;

/// First two lines of the index, as the reference words them.
pub const HEADING: &str = "Enabled async tool globals (descriptions are intentionally deferred):\n\
Each line is `callableName input -> output`; `-> ?` means unknown output.";
/// Heading of the second tier: names whose hints did not fit.
pub const NAMES_HEADING: &str = "Also callable (input hints via catalog.search(name) or handle.describe()):";
/// The reference's budget, in characters.
pub const REFERENCE_BUDGET: usize = 8_000;
/// Our budget, in characters: below the reference's, so the whole exec description stays below the reference's
/// even when the reference fills its budget to the last character.
pub const DEFAULT_BUDGET: usize = 7_600;
/// Share of the budget hinted lines may take when not even every bare name fits.
const HINT_SHARE_WHEN_CROWDED: f64 = 0.5;

/// The quick index and what it covers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct QuickIndex {
    /// The text, ready to embed.
    pub text: String,
    /// Tools named in the text (with or without a hint).
    pub named: usize,
    /// Tools left to `catalog.search`.
    pub omitted: usize,
}

/// One tool's line material.
pub struct IndexItem<'a> {
    /// The callable name.
    pub name: &'a str,
    /// The input hint, `unknown` when none.
    pub input: &'a str,
    /// The trusted output hint.
    pub output: Option<&'a str>,
    /// What the tool policy says, when it gates the tool (`needs approval …`, `denied by policy …`).
    pub note: Option<&'a str>,
}

fn footer(omitted: usize) -> String {
    if omitted > 0 {
        format!(
            "{omitted} additional tools omitted from this prompt index. Use catalog.search(query); results are callable."
        )
    } else {
        "Call these globals directly; use catalog.search(query) when lookup is ambiguous.".to_owned()
    }
}

fn line(item: &IndexItem<'_>) -> String {
    match item.note {
        Some(note) => format!("- {} {} -> {} ({note})", item.name, item.input, item.output.unwrap_or("?")),
        None => format!("- {} {} -> {}", item.name, item.input, item.output.unwrap_or("?")),
    }
}

/// A tool in the name tier: its callable name, with the short form of its policy note (`needs approval`,
/// `denied by policy`) when the policy gates it, so the model knows before it calls.
fn bare(item: &IndexItem<'_>) -> String {
    match item.note {
        Some(note) => format!("{} ({})", item.name, note.split(':').next().unwrap_or(note)),
        None => item.name.to_owned(),
    }
}

fn len(s: &str) -> usize {
    s.chars().count()
}

/// Items in index order: declared outputs first, then by callable name.
fn ordered<'a, 'b>(items: &'b [IndexItem<'a>]) -> Vec<&'b IndexItem<'a>> {
    let mut v: Vec<&IndexItem<'a>> = items.iter().collect();
    // As the reference's `localeCompare` orders names, so `API_x` files under `a`.
    v.sort_by(|a, b| {
        a.output.is_none().cmp(&b.output.is_none()).then_with(|| crate::names::locale_cmp(a.name, b.name))
    });
    v
}

/// The reference's packing: whole when it fits, else greedy lines in order, skipping lines that do not fit.
pub fn reference(items: &[IndexItem<'_>], budget: usize) -> QuickIndex {
    let lines: Vec<String> = ordered(items).iter().map(|i| line(i)).collect();
    let whole = format!("{HEADING}\n{}\n{}", lines.join("\n"), footer(0));
    if len(&whole) <= budget || items.is_empty() {
        return QuickIndex { text: whole, named: items.len(), omitted: 0 };
    }
    // Reserve the longest footer the omitted count could need.
    let reserve = len(&footer(items.len())) + 1;
    let mut used = len(HEADING);
    let mut kept: Vec<&str> = Vec::new();
    for l in &lines {
        let cost = len(l) + 1;
        if used + cost + reserve <= budget {
            used += cost;
            kept.push(l);
        }
    }
    let omitted = items.len() - kept.len();
    let text = format!("{HEADING}\n{}\n{}", kept.join("\n"), footer(omitted));
    QuickIndex { text, named: kept.len(), omitted }
}

/// Our packing: hinted lines where they fit without pushing any other tool out, then every remaining name in one
/// comma-separated tier. Lines that say nothing beyond the name (`unknown -> ?`) go straight to the name tier.
pub fn build(items: &[IndexItem<'_>], budget: usize) -> QuickIndex {
    let order = ordered(items);
    let whole_lines: Vec<String> = order.iter().map(|i| line(i)).collect();
    let whole = format!("{HEADING}\n{}\n{}", whole_lines.join("\n"), footer(0));
    if len(&whole) <= budget || items.is_empty() {
        return QuickIndex { text: whole, named: items.len(), omitted: 0 };
    }
    let informative = |i: &IndexItem<'_>| i.input != "unknown" || i.output.is_some();
    let name_cost = |i: &IndexItem<'_>| len(&bare(i)) + 2;
    let fixed = len(HEADING) + 1 + len(NAMES_HEADING) + 1 + len(&footer(items.len())) + 1;
    let all_names: usize = order.iter().map(|i| name_cost(i)).sum();
    let mut hinted: Vec<usize> = Vec::new();
    let mut in_lines = vec![false; order.len()];
    if fixed + all_names <= budget {
        // Every name fits bare: upgrade names to hinted lines while the rest still fits.
        let mut used = fixed + all_names;
        for (k, item) in order.iter().enumerate() {
            if !informative(item) {
                continue;
            }
            let cost = len(&whole_lines[k]) + 1;
            if used - name_cost(item) + cost <= budget {
                used = used - name_cost(item) + cost;
                in_lines[k] = true;
                hinted.push(k);
            }
        }
    } else {
        // Crowded: hinted lines get a share of the budget, bare names the rest.
        let share = ((budget.saturating_sub(fixed)) as f64 * HINT_SHARE_WHEN_CROWDED) as usize;
        let mut used = 0;
        for (k, item) in order.iter().enumerate() {
            let cost = len(&whole_lines[k]) + 1;
            if informative(item) && used + cost <= share {
                used += cost;
                in_lines[k] = true;
                hinted.push(k);
            }
        }
    }
    let mut used = fixed + hinted.iter().map(|&k| len(&whole_lines[k]) + 1).sum::<usize>();
    let mut names: Vec<String> = Vec::new();
    for (k, item) in order.iter().enumerate() {
        if in_lines[k] {
            continue;
        }
        let cost = name_cost(item);
        if used + cost <= budget {
            used += cost;
            names.push(bare(item));
        }
    }
    let named = hinted.len() + names.len();
    let omitted = items.len() - named;
    let mut text = String::with_capacity(budget);
    text.push_str(HEADING);
    for &k in &hinted {
        text.push('\n');
        text.push_str(&whole_lines[k]);
    }
    if !names.is_empty() {
        text.push('\n');
        text.push_str(NAMES_HEADING);
        text.push('\n');
        text.push_str(&names.join(", "));
    }
    text.push('\n');
    text.push_str(&footer(omitted));
    QuickIndex { text, named, omitted }
}
