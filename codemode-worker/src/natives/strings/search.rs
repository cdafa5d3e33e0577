//! Code-unit substring search over Boa strings in linear time (memchr's two-way searcher).
//! Not a general string library: it only answers "where is this needle" for the String built-ins.
//! Invariant: every index is a UTF-16 code-unit index, whatever the Latin-1/UTF-16 storage of either side.

use boa_engine::string::{JsStr, JsStrVariant};
use memchr::memmem;

/// A needle prepared once for many searches in the same haystack (split, replaceAll).
pub(crate) struct Searcher<'h> {
    kind: Kind<'h>,
    hay_len: usize,
    needle_len: usize,
}

enum Kind<'h> {
    /// The needle cannot occur in the haystack (a non-Latin-1 code unit in a Latin-1 haystack).
    Never,
    /// The needle is empty: it matches at every position.
    Empty,
    Latin1 {
        hay: &'h [u8],
        finder: memmem::Finder<'static>,
    },
    Utf16 {
        hay: &'h [u16],
        finder: memmem::Finder<'static>,
    },
}

impl<'h> Searcher<'h> {
    pub(crate) fn new(haystack: JsStr<'h>, needle: JsStr<'_>) -> Self {
        let (hay_len, needle_len) = (haystack.len(), needle.len());
        if needle_len == 0 {
            return Self { kind: Kind::Empty, hay_len, needle_len };
        }
        let kind = match haystack.variant() {
            JsStrVariant::Latin1(hay) => {
                let narrow: Option<Vec<u8>> = needle.iter().map(|unit| u8::try_from(unit).ok()).collect();
                match narrow {
                    Some(narrow) => Kind::Latin1 { hay, finder: memmem::Finder::new(&narrow).into_owned() },
                    None => Kind::Never,
                }
            }
            JsStrVariant::Utf16(hay) => {
                let bytes: Vec<u8> = needle.iter().flat_map(u16::to_ne_bytes).collect();
                Kind::Utf16 { hay, finder: memmem::Finder::new(&bytes).into_owned() }
            }
        };
        Self { kind, hay_len, needle_len }
    }

    /// `StringIndexOf(haystack, needle, from)`: the first match at or after `from`.
    pub(crate) fn find(&self, from: usize) -> Option<usize> {
        match &self.kind {
            Kind::Never => None,
            Kind::Empty => (from <= self.hay_len).then_some(from),
            Kind::Latin1 { hay, finder } => finder.find(hay.get(from..)?).map(|i| i + from),
            Kind::Utf16 { hay, finder } => {
                let bytes = units_as_bytes(hay);
                let mut at = from.checked_mul(2)?;
                loop {
                    let found = at + finder.find(bytes.get(at..)?)?;
                    if found % 2 == 0 {
                        return Some(found / 2);
                    }
                    // A match straddling two code units is not a match; look again one byte further on.
                    at = found + 1;
                }
            }
        }
    }

    /// The last match starting at or before `start` (the search loop of `lastIndexOf`).
    pub(crate) fn rfind(&self, start: usize) -> Option<usize> {
        let len = self.hay_len;
        if self.needle_len > len {
            return None;
        }
        let end = start.min(len - self.needle_len) + self.needle_len;
        match &self.kind {
            Kind::Never => None,
            Kind::Empty => Some(start.min(len)),
            Kind::Latin1 { hay, .. } => {
                let needle = self.needle_bytes();
                memmem::rfind(&hay[..end], needle)
            }
            Kind::Utf16 { hay, .. } => {
                let bytes = units_as_bytes(hay);
                let needle = self.needle_bytes();
                let mut end = end * 2;
                loop {
                    let found = memmem::rfind(&bytes[..end], needle)?;
                    if found % 2 == 0 {
                        return Some(found / 2);
                    }
                    end = found + needle.len() - 1;
                }
            }
        }
    }

    pub(crate) fn needle_len(&self) -> usize {
        self.needle_len
    }

    fn needle_bytes(&self) -> &[u8] {
        match &self.kind {
            Kind::Latin1 { finder, .. } | Kind::Utf16 { finder, .. } => finder.needle(),
            Kind::Never | Kind::Empty => &[],
        }
    }
}

/// Views UTF-16 code units as native-endian bytes, so one byte searcher serves both storages.
fn units_as_bytes(units: &[u16]) -> &[u8] {
    // SAFETY: `u8` has alignment 1 and no invalid bit patterns, the byte length is exactly twice the unit length,
    // and the returned slice borrows `units`, so it cannot outlive the memory it points to.
    unsafe { std::slice::from_raw_parts(units.as_ptr().cast::<u8>(), std::mem::size_of_val(units)) }
}
