//! A string accumulator that stays Latin-1 until a wider code unit arrives, so ASCII results stay compact.
//! Not a rope: it copies each piece once, which keeps `replace`/`replaceAll` linear in their output.
//! Invariant: the built string holds exactly the code units pushed, in order.

use boa_engine::{
    JsString,
    string::{JsStr, JsStrVariant},
};

pub(crate) enum StrBuf {
    Latin1(Vec<u8>),
    Utf16(Vec<u16>),
}

impl StrBuf {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self::Latin1(Vec::with_capacity(capacity))
    }

    pub(crate) fn push(&mut self, piece: JsStr<'_>) {
        match (&mut *self, piece.variant()) {
            (Self::Latin1(out), JsStrVariant::Latin1(bytes)) => out.extend_from_slice(bytes),
            (Self::Utf16(out), JsStrVariant::Latin1(bytes)) => out.extend(bytes.iter().copied().map(u16::from)),
            (Self::Utf16(out), JsStrVariant::Utf16(units)) => out.extend_from_slice(units),
            (Self::Latin1(out), JsStrVariant::Utf16(units)) => {
                if let Some(narrow) = units.iter().map(|&unit| u8::try_from(unit).ok()).collect::<Option<Vec<u8>>>() {
                    out.extend_from_slice(&narrow);
                } else {
                    let mut wide: Vec<u16> = Vec::with_capacity(out.capacity().max(out.len() + units.len()));
                    wide.extend(out.iter().copied().map(u16::from));
                    wide.extend_from_slice(units);
                    *self = Self::Utf16(wide);
                }
            }
        }
    }

    pub(crate) fn build(self) -> JsString {
        match self {
            Self::Latin1(bytes) => JsString::from(JsStr::latin1(&bytes)),
            Self::Utf16(units) => JsString::from(&units[..]),
        }
    }
}
