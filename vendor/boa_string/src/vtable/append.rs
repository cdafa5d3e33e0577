//! Append strings: `a + b` in amortised time proportional to `b` when `a` is what was last
//! appended to a growable buffer (codemode's patch to Boa 0.22, see `PATCH.md`).
//!
//! Boa concatenates by copying both operands into a new allocation, so a loop of `s += x`
//! copies the accumulator every time and is quadratic. A long concatenation whose left operand
//! dominates now writes into an [`AppendBuffer`] with spare capacity, and the result is an
//! [`AppendString`]: a reference-counted view of the buffer's first `len` code units. The next
//! concatenation whose left operand is exactly the buffer's used prefix writes the right operand
//! after it, in place, and returns a longer view of the same buffer.
//!
//! Why this is sound: a buffer's units `[0, used)` are never written again, every view covers a
//! prefix `[0, len)` with `len <= used`, and only units at `used` or beyond are written, so no
//! live `JsStr` ever observes a change. Identification goes by address: a `JsStr` whose data
//! pointer is a live buffer's start and whose length is its `used` count *is* that prefix,
//! whichever string it was borrowed from, because `used > 0` puts its end strictly inside (or
//! at the end of) the buffer's own allocation. Buffers are found through a small thread-local
//! ring of weak references; strings never cross threads (`JsString` is `!Send`).
use crate::iter::CodePointsIter;
use crate::vtable::JsStringVTable;
use crate::{JsStr, JsStrVariant, JsString, JsStringKind};
use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::cell::{Cell, RefCell};
use std::process::abort;
use std::ptr::{self, NonNull};
use std::rc::{Rc, Weak};

/// Shorter results are copied as before: the copy is cheap and a buffer is not worth its slack.
const MIN_LEN: usize = 256;

/// How many buffers are remembered per thread: a few accumulators built in the same loop.
const RING: usize = 4;

thread_local! {
    static RECENT: RefCell<[Weak<AppendBuffer>; RING]> = RefCell::new(Default::default());
    static NEXT_SLOT: Cell<usize> = const { Cell::new(0) };
}

/// A fixed-capacity allocation of Latin-1 or UTF-16 code units, filled front to back.
pub(crate) struct AppendBuffer {
    data: NonNull<u8>,
    capacity: usize,
    used: Cell<usize>,
    latin1: bool,
}

impl AppendBuffer {
    fn layout(capacity: usize, latin1: bool) -> Layout {
        let layout = if latin1 {
            Layout::array::<u8>(capacity)
        } else {
            Layout::array::<u16>(capacity)
        };
        layout.unwrap_or_else(|_| crate::alloc_overflow())
    }

    fn new(capacity: usize, latin1: bool) -> Self {
        let layout = Self::layout(capacity, latin1);
        // SAFETY: `capacity >= MIN_LEN`, so the layout has a non-zero size.
        let data = unsafe { alloc(layout) };
        let Some(data) = NonNull::new(data) else {
            handle_alloc_error(layout)
        };
        Self {
            data,
            capacity,
            used: Cell::new(0),
            latin1,
        }
    }

    /// Writes `piece` at the end of the used units. The caller checked the capacity, and that a
    /// Latin-1 buffer only receives Latin-1 pieces.
    ///
    /// # Safety
    /// `used + piece.len() <= capacity`, and `piece` is Latin-1 when the buffer is.
    unsafe fn push(&self, piece: JsStr<'_>) {
        let used = self.used.get();
        // SAFETY: the caller guarantees the room; units at `used` and beyond are not visible
        // through any `JsStr`, and `piece` cannot overlap them for the same reason.
        unsafe {
            match (self.latin1, piece.variant()) {
                (true, JsStrVariant::Latin1(s)) => {
                    ptr::copy_nonoverlapping(s.as_ptr(), self.data.as_ptr().add(used), s.len());
                }
                (false, JsStrVariant::Latin1(s)) => {
                    let dst = self.data.as_ptr().cast::<u16>().add(used);
                    for (i, &unit) in s.iter().enumerate() {
                        dst.add(i).write(u16::from(unit));
                    }
                }
                (false, JsStrVariant::Utf16(s)) => {
                    let dst = self.data.as_ptr().cast::<u16>().add(used);
                    ptr::copy_nonoverlapping(s.as_ptr(), dst, s.len());
                }
                (true, JsStrVariant::Utf16(_)) => unreachable!("checked by the caller"),
            }
        }
        self.used.set(used + piece.len());
    }

    /// The units `[0, len)`, which never change once written.
    fn prefix(&self, len: usize) -> JsStr<'static> {
        debug_assert!(len <= self.used.get());
        // SAFETY: the units are initialised and live as long as the buffer; the `'static` is
        // narrowed by `JsString::as_str`, as for the other kinds.
        unsafe {
            if self.latin1 {
                JsStr::latin1(std::slice::from_raw_parts(self.data.as_ptr(), len))
            } else {
                JsStr::utf16(std::slice::from_raw_parts(self.data.as_ptr().cast(), len))
            }
        }
    }

    /// Whether `s` is exactly this buffer's used prefix.
    fn is_tail_of(&self, s: JsStr<'_>) -> bool {
        let used = self.used.get();
        if used == 0 || s.len() != used {
            return false;
        }
        match s.variant() {
            JsStrVariant::Latin1(units) => self.latin1 && ptr::eq(units.as_ptr(), self.data.as_ptr()),
            JsStrVariant::Utf16(units) => {
                !self.latin1 && ptr::eq(units.as_ptr(), self.data.as_ptr().cast())
            }
        }
    }
}

impl Drop for AppendBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.data.as_ptr(), Self::layout(self.capacity, self.latin1)) };
    }
}

/// A view of the first `len` units of an [`AppendBuffer`].
#[repr(C)]
pub(crate) struct AppendString {
    /// Embedded `VTable` - must be the first field for vtable dispatch.
    vtable: JsStringVTable,
    refcount: Cell<usize>,
    buffer: Rc<AppendBuffer>,
}

impl AppendString {
    fn into_js_string(buffer: Rc<AppendBuffer>) -> JsString {
        let string = Box::new(AppendString {
            vtable: JsStringVTable {
                clone: append_clone,
                drop: append_drop,
                as_str: append_as_str,
                code_points: append_code_points,
                refcount: append_refcount,
                len: buffer.used.get(),
                kind: JsStringKind::Append,
            },
            refcount: Cell::new(1),
            buffer,
        });
        // SAFETY: `AppendString` starts with its vtable, which matches its kind.
        unsafe { JsString::from_ptr(NonNull::from(Box::leak(string)).cast()) }
    }
}

/// Concatenates `strings` through an append buffer, or returns `None` when the plain copy is
/// the better choice (short results, a right operand that dominates). `total` and `latin1` are
/// the length and encoding the caller computed for the whole result.
///
/// The length check is inlined into `concat_array`; the rest is kept out of line, so that short
/// concatenations, the common case, pay one comparison.
#[inline]
pub(crate) fn concat(strings: &[JsStr<'_>], total: usize, latin1: bool) -> Option<JsString> {
    if total < MIN_LEN {
        return None;
    }
    concat_long(strings, total, latin1)
}

#[inline(never)]
fn concat_long(strings: &[JsStr<'_>], total: usize, latin1: bool) -> Option<JsString> {
    let (&first, rest) = strings.split_first()?;
    if rest.is_empty() || first.len() < total / 2 {
        return None;
    }
    let rest_len = total - first.len();

    if let Some(buffer) = find_tail_of(first) {
        let fits = buffer.used.get() + rest_len <= buffer.capacity;
        if fits && (latin1 || !buffer.latin1) {
            for &piece in rest {
                // SAFETY: room checked above; a Latin-1 buffer gets only Latin-1 pieces, since
                // `latin1` is true exactly when every piece is Latin-1.
                unsafe { buffer.push(piece) };
            }
            return Some(AppendString::into_js_string(buffer));
        }
        // Full, or a wider encoding: move on to a buffer twice the size.
        return Some(fresh(strings, total, latin1, total.saturating_mul(2)));
    }
    // The first long concatenation of this value: a little slack, in case it is an accumulator.
    Some(fresh(strings, total, latin1, total.saturating_add(total / 4)))
}

fn fresh(strings: &[JsStr<'_>], total: usize, latin1: bool, capacity: usize) -> JsString {
    let buffer = Rc::new(AppendBuffer::new(capacity.max(total), latin1));
    for &piece in strings {
        // SAFETY: `capacity >= total` and `latin1` describes every piece.
        unsafe { buffer.push(piece) };
    }
    remember(&buffer);
    AppendString::into_js_string(buffer)
}

fn find_tail_of(s: JsStr<'_>) -> Option<Rc<AppendBuffer>> {
    RECENT.with_borrow(|ring| {
        ring.iter()
            .filter_map(Weak::upgrade)
            .find(|buffer| buffer.is_tail_of(s))
    })
}

fn remember(buffer: &Rc<AppendBuffer>) {
    let slot = NEXT_SLOT.get();
    NEXT_SLOT.set((slot + 1) % RING);
    RECENT.with_borrow_mut(|ring| ring[slot] = Rc::downgrade(buffer));
}

#[inline]
fn append_clone(vtable: NonNull<JsStringVTable>) -> JsString {
    // SAFETY: This is part of the correct vtable which is validated on construction.
    let this: &AppendString = unsafe { vtable.cast().as_ref() };
    let Some(strong) = this.refcount.get().checked_add(1) else {
        abort();
    };
    this.refcount.set(strong);
    // SAFETY: validated the string outside this function.
    unsafe { JsString::from_ptr(vtable) }
}

#[inline]
fn append_drop(vtable: NonNull<JsStringVTable>) {
    // SAFETY: This is part of the correct vtable which is validated on construction.
    let this: &AppendString = unsafe { vtable.cast().as_ref() };
    let Some(new) = this.refcount.get().checked_sub(1) else {
        abort();
    };
    this.refcount.set(new);
    if new != 0 {
        return;
    }
    // SAFETY: This is the last reference; the string was allocated as a `Box<AppendString>`.
    unsafe {
        drop(Box::from_raw(vtable.cast::<AppendString>().as_ptr()));
    }
}

#[inline]
fn append_as_str(vtable: NonNull<JsStringVTable>) -> JsStr<'static> {
    // SAFETY: This is part of the correct vtable which is validated on construction.
    let this: &AppendString = unsafe { vtable.cast().as_ref() };
    this.buffer.prefix(this.vtable.len)
}

#[inline]
fn append_code_points(vtable: NonNull<JsStringVTable>) -> CodePointsIter<'static> {
    CodePointsIter::new(append_as_str(vtable))
}

/// `VTable` function for refcount, need to return an `Option<usize>`.
#[inline]
#[allow(clippy::unnecessary_wraps)]
fn append_refcount(vtable: NonNull<JsStringVTable>) -> Option<usize> {
    // SAFETY: This is part of the correct vtable which is validated on construction.
    let this: &AppendString = unsafe { vtable.cast().as_ref() };
    Some(this.refcount.get())
}
