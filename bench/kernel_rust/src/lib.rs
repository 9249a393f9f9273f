//! The warm lookup of `dkmsks.core.kernel.lookup` (`_lookup_warm` and `_warm_fitting`) written
//! in Rust, for `bench/rust.py`: issue 18 asks for the compiled kernel to be numba or a Rust
//! extension, chosen by measurement. This is the measurement's other side, not a product path.
//!
//! The same steps in the same order as the numba function, so that both return the same pairs
//! in the same order and the same per-object counts: every probe key through the postings' key
//! filter; its run of equal keys found by binary search in the sorted main part and in the
//! sorted delta; each entry whose epoch is its row's tested exactly (the radius it was posted
//! with, the liveness interval, then the k-th result with the tie-break of docs/design.md §1).
//! `d²` is `dx * dx + dy * dy` without a fused multiply-add, as numba computes it.
//!
//! Called through a C ABI with one `#[repr(C)]` struct of pointers and lengths (ctypes on the
//! Python side), so the crate has no dependencies. Two builds of the loop: with Rust's bounds
//! checks on every index (idiomatic Rust) and without them (what numba compiles by default).

use std::slice;

/// Bits of a filter slot index, and the hashes' multipliers (`kernel/key_filter.py`).
const FILTER_BITS: u32 = 23;
const FILTER_BLOCK_BITS: u32 = 9;
const FILTER_MUL1: u64 = 0x9E37_79B9_7F4A_7C15;
const FILTER_MUL2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const FILTER_SHIFT: u32 = 64 - FILTER_BITS;
const BLOCK_SHIFT: u32 = 64 - FILTER_BLOCK_BITS;
const BLOCK_BASE: u64 = !((1u64 << FILTER_BLOCK_BITS) - 1) & ((1u64 << FILTER_BITS) - 1);

/// One lookup's inputs and outputs, as the Python side lays them out (`dkmsks/bench/rust.py`).
/// Each array is a pointer and its length; the kNN matrices are `n_rows x width`, row-major.
#[repr(C)]
pub struct Lookup {
    pub n_q: usize,
    pub qkeys: *const i64,
    pub qowner: *const i64,
    pub n_present: usize,
    pub present: *const u8,
    pub n_keys: usize,
    pub keys: *const i64,
    pub prow: *const i32,
    pub n_prow_epoch: usize,
    pub prow_epoch: *const i32,
    pub n_dkeys: usize,
    pub dkeys: *const i64,
    pub drow: *const i32,
    pub dep: *const i32,
    pub n_epoch: usize,
    pub epoch: *const i32,
    pub n_rows: usize,
    pub width: usize,
    pub s_t: *const i64,
    pub s_end: *const i64,
    pub s_x: *const f64,
    pub s_y: *const f64,
    pub s_k: *const i32,
    pub s_ids: *const i64,
    pub s_d2: *const f64,
    pub n_r: usize,
    pub s_r: *const f64,
    pub n_obj: usize,
    pub o_t: *const i64,
    pub o_x: *const f64,
    pub o_y: *const f64,
    pub o_ids: *const i64,
    /// Out: live entries met per object (added to: the caller zeroes it), `n_obj` long.
    pub tested: *mut i64,
    /// In: the first probe key to look up, and the pairs already in the output arrays.
    pub start_q: usize,
    pub n: usize,
    /// Out: the first probe key not looked up (`n_q` when all were): the next key's pairs did
    /// not fit in `cap`, so the caller grows the arrays and calls again from there, as
    /// numba's `_lookup_warm` does between calls of `_warm_fitting`.
    pub stop_q: usize,
    /// Out: with `stop_q < n_q`, the pairs the arrays must hold to take that key's entries.
    pub need: usize,
    /// Out: the accepted pairs, up to `cap` of them; the return value is how many there are.
    pub cap: usize,
    pub a_row: *mut i64,
    pub a_oid: *mut i64,
    pub a_d2: *mut f64,
    pub a_ot: *mut i64,
}

unsafe fn view<'a, T>(p: *const T, n: usize) -> &'a [T] {
    if n == 0 {
        &[]
    } else {
        slice::from_raw_parts(p, n)
    }
}

unsafe fn view_mut<'a, T>(p: *mut T, n: usize) -> &'a mut [T] {
    if n == 0 {
        &mut []
    } else {
        slice::from_raw_parts_mut(p, n)
    }
}

/// `a[i]`, bounds-checked or not.
#[inline(always)]
fn at<T: Copy, const CHECKED: bool>(a: &[T], i: usize) -> T {
    if CHECKED {
        a[i]
    } else {
        unsafe { *a.get_unchecked(i) }
    }
}

/// `a[i] = v`, bounds-checked or not.
#[inline(always)]
fn put<T, const CHECKED: bool>(a: &mut [T], i: usize, v: T) {
    if CHECKED {
        a[i] = v;
    } else {
        unsafe { *a.get_unchecked_mut(i) = v }
    }
}

#[inline(always)]
fn filtered<const CHECKED: bool>(present: &[u8], key: i64) -> bool {
    let u = key as u64;
    let a = u.wrapping_mul(FILTER_MUL1) >> FILTER_SHIFT;
    let b = (a & BLOCK_BASE) | (u.wrapping_mul(FILTER_MUL2) >> BLOCK_SHIFT);
    let bit_a = at::<u8, CHECKED>(present, (a >> 3) as usize) >> (a & 7);
    let bit_b = at::<u8, CHECKED>(present, (b >> 3) as usize) >> (b & 7);
    bit_a & bit_b & 1 == 1
}

/// The first position of sorted `keys` whose key is `>= key` (numpy's `searchsorted`, left).
#[inline(always)]
fn first_at_least(keys: &[i64], key: i64) -> usize {
    keys.partition_point(|&k| k < key)
}

#[inline(always)]
fn run_end<const CHECKED: bool>(keys: &[i64], mut i: usize, key: i64) -> usize {
    while i < keys.len() && at::<i64, CHECKED>(keys, i) == key {
        i += 1;
    }
    i
}

/// The exact test (`enters` of `core/knn_state.py`): the result is not full, or `(d², id)`
/// comes before its k-th.
#[inline(always)]
fn enters(d2: f64, oid: i64, kd2: f64, kid: i64) -> bool {
    kid < 0 || d2 < kd2 || (d2 == kd2 && oid < kid)
}

unsafe fn lookup<const CHECKED: bool>(l: &mut Lookup) -> usize {
    let qkeys = view(l.qkeys, l.n_q);
    let qowner = view(l.qowner, l.n_q);
    let present = view(l.present, l.n_present);
    let keys = view(l.keys, l.n_keys);
    let prow = view(l.prow, l.n_keys);
    let prow_epoch = view(l.prow_epoch, l.n_prow_epoch);
    let dkeys = view(l.dkeys, l.n_dkeys);
    let drow = view(l.drow, l.n_dkeys);
    let dep = view(l.dep, l.n_dkeys);
    let epoch = view(l.epoch, l.n_epoch);
    let s_t = view(l.s_t, l.n_rows);
    let s_end = view(l.s_end, l.n_rows);
    let s_x = view(l.s_x, l.n_rows);
    let s_y = view(l.s_y, l.n_rows);
    let s_k = view(l.s_k, l.n_rows);
    let s_ids = view(l.s_ids, l.n_rows * l.width);
    let s_d2 = view(l.s_d2, l.n_rows * l.width);
    let s_r = view(l.s_r, l.n_r);
    let o_t = view(l.o_t, l.n_obj);
    let o_x = view(l.o_x, l.n_obj);
    let o_y = view(l.o_y, l.n_obj);
    let o_ids = view(l.o_ids, l.n_obj);
    let tested = view_mut(l.tested, l.n_obj);
    let a_row = view_mut(l.a_row, l.cap);
    let a_oid = view_mut(l.a_oid, l.cap);
    let a_d2 = view_mut(l.a_d2, l.cap);
    let a_ot = view_mut(l.a_ot, l.cap);
    let bounded = !s_r.is_empty();
    let width = l.width;
    let cap = l.cap;
    let mut n = l.n;

    // One live entry's test; `row` is its state row.
    let mut test = |row: usize, obj: usize, ot: i64, ox: f64, oy: f64, oid: i64, n: &mut usize| {
        put::<i64, CHECKED>(tested, obj, at::<i64, CHECKED>(tested, obj) + 1);
        let dx = ox - at::<f64, CHECKED>(s_x, row);
        let dy = oy - at::<f64, CHECKED>(s_y, row);
        let d2 = dx * dx + dy * dy;
        if bounded {
            let r = at::<f64, CHECKED>(s_r, row);
            if d2 > r * r {
                return; // beyond the radius it was posted with: beyond the ball
            }
        }
        if !(at::<i64, CHECKED>(s_t, row) <= ot && ot < at::<i64, CHECKED>(s_end, row)) {
            return;
        }
        let kth = row * width + (at::<i32, CHECKED>(s_k, row) - 1) as usize;
        if enters(d2, oid, at::<f64, CHECKED>(s_d2, kth), at::<i64, CHECKED>(s_ids, kth)) {
            // Room was made for every entry of the key before its entries were tested.
            put::<i64, CHECKED>(a_row, *n, row as i64);
            put::<i64, CHECKED>(a_oid, *n, oid);
            put::<f64, CHECKED>(a_d2, *n, d2);
            put::<i64, CHECKED>(a_ot, *n, ot);
            *n += 1;
        }
    };

    for q in l.start_q..qkeys.len() {
        let key = at::<i64, CHECKED>(qkeys, q);
        if !filtered::<CHECKED>(present, key) {
            continue; // most probe keys have no posting
        }
        let lo0 = first_at_least(keys, key);
        let hi0 = run_end::<CHECKED>(keys, lo0, key);
        let lo1 = first_at_least(dkeys, key);
        let hi1 = run_end::<CHECKED>(dkeys, lo1, key);
        if n + (hi0 - lo0) + (hi1 - lo1) > cap {
            l.stop_q = q;
            l.need = n + (hi0 - lo0) + (hi1 - lo1);
            return n;
        }
        let obj = at::<i64, CHECKED>(qowner, q) as usize;
        let (ot, ox, oy, oid) = (
            at::<i64, CHECKED>(o_t, obj),
            at::<f64, CHECKED>(o_x, obj),
            at::<f64, CHECKED>(o_y, obj),
            at::<i64, CHECKED>(o_ids, obj),
        );
        for e in lo0..hi0 {
            let row = at::<i32, CHECKED>(prow, e) as usize;
            // A main entry's epoch is its row's at the last rebuild.
            if at::<i32, CHECKED>(prow_epoch, row) != at::<i32, CHECKED>(epoch, row) {
                continue;
            }
            test(row, obj, ot, ox, oy, oid, &mut n);
        }
        for e in lo1..hi1 {
            let row = at::<i32, CHECKED>(drow, e) as usize;
            if at::<i32, CHECKED>(dep, e) != at::<i32, CHECKED>(epoch, row) {
                continue;
            }
            test(row, obj, ot, ox, oy, oid, &mut n);
        }
    }
    l.stop_q = qkeys.len();
    n
}

/// The warm lookup with every index bounds-checked, from probe key `start_q` on while the pairs
/// fit; returns the number of accepted pairs in the output arrays and sets `stop_q`.
///
/// # Safety
/// Every pointer of `l` must point to as many elements as its length says, and `l` itself
/// must be valid; the output arrays must not overlap the inputs.
#[no_mangle]
pub unsafe extern "C" fn lookup_warm_checked(l: *mut Lookup) -> usize {
    lookup::<true>(&mut *l)
}

/// The same without bounds checks (an index out of range is undefined behaviour).
///
/// # Safety
/// As [`lookup_warm_checked`], and every row, object and key position the inputs name must
/// be in range (the Python side runs the checked build on the same inputs first).
#[no_mangle]
pub unsafe extern "C" fn lookup_warm_unchecked(l: *mut Lookup) -> usize {
    lookup::<false>(&mut *l)
}

/// Nothing: the cost of a call through ctypes with the struct, measured apart.
///
/// # Safety
/// None needed; the pointer is not read.
#[no_mangle]
pub unsafe extern "C" fn lookup_nothing(_l: *mut Lookup) -> usize {
    0
}
