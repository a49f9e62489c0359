//! A tensor's values as a JSON `data` array (KServe v2's JSON tensors), both ways, without Python, giving what
//! Python's codec (`http_codec.tensor_from_json`, `http_codec.json_data` under `json`) gives for the same
//! values: the same array, and the same text written.
//!
//! Both are fast paths, not second codecs. [`read_values`] answers `Some` only where Python reads the `data`
//! into an array of those values without an error; anything else (a string among numbers, a null, a bool among
//! numbers, an integer past what a double holds exactly in a float tensor, a float in an integer tensor, a value
//! out of the datatype's range, the wrong number of values) is `None`, and Python reads it, with its own
//! messages. A BYTES tensor's strings are read as the binary extension carries them (each its length, 4 bytes
//! little-endian, then its UTF-8). [`write_values`] declines (false) NaN and infinities, which Python refuses,
//! and BYTES.

use std::fmt::{self, Write};

use serde::de::{DeserializeSeed, Deserializer, SeqAccess, Visitor};

/// Integers beyond this may round on their way to a double; numpy then rounds once where this would round twice.
const EXACT_INT: u64 = 1 << 53;
/// Every integer up to this is a half exactly.
const EXACT_HALF_INT: u64 = 1 << 11;

/// `v` as an IEEE half, rounded to the nearest (a tie to the even one) straight from the double, as numpy's
/// `astype(float16)` rounds; None past the largest half (an infinity, which Python refuses). `v` is finite.
fn f64_to_half(v: f64) -> Option<u16> {
    let bits = v.to_bits();
    let sign = ((bits >> 48) & 0x8000) as u16;
    let exponent = ((bits >> 52) & 0x7ff) as i32 - 1023;
    let fraction = bits & ((1 << 52) - 1);
    if exponent < -25 {
        return Some(sign); // below half the smallest subnormal half (or zero): zero
    }
    // the significand with its implicit bit, and how many of its low bits the half leaves out
    let significand = fraction | (1 << 52);
    let dropped = if exponent < -14 {
        42 + (-14 - exponent)
    } else {
        42
    } as u32;
    let kept = significand >> dropped;
    let rest = significand & ((1u64 << dropped) - 1);
    let half_way = 1u64 << (dropped - 1);
    let rounded = kept + u64::from(rest > half_way || (rest == half_way && kept & 1 == 1));
    let half = if exponent < -14 {
        rounded // subnormal: the exponent field 0 (a carry into 0x400 makes the smallest normal, as it should)
    } else {
        // normal: the implicit bit (0x400) adds one to the biased exponent; a carry past 0x7ff bumps it once more
        (((exponent + 14) as u64) << 10) + rounded
    };
    (half < 0x7c00).then_some(sign | half as u16)
}

/// The strings of `raw` (a JSON array of strings, nested or ragged), `count` of them, each as the binary
/// extension serializes a BYTES element.
fn read_strings(raw: &str, count: usize) -> Option<Vec<u8>> {
    if !raw.starts_with('[') {
        return None;
    }
    let mut out = Vec::with_capacity(raw.len() + 4 * count.min(raw.len()));
    let mut seen = 0usize;
    let mut reader = serde_json::Deserializer::from_str(raw);
    Strings {
        out: &mut out,
        seen: &mut seen,
    }
    .deserialize(&mut reader)
    .ok()?;
    (seen == count && count > 0).then_some(out)
}

/// Flattens nested arrays of strings into `out` (any other value: an error, left to Python).
struct Strings<'a> {
    out: &'a mut Vec<u8>,
    seen: &'a mut usize,
}

impl<'de> DeserializeSeed<'de> for Strings<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strings<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("strings in arrays")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<(), E> {
        let length = u32::try_from(text.len()).map_err(|_| E::custom("too long"))?;
        self.out.extend_from_slice(&length.to_le_bytes());
        self.out.extend_from_slice(text.as_bytes());
        *self.seen += 1;
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        while items
            .next_element_seed(Strings {
                out: &mut *self.out,
                seen: &mut *self.seen,
            })?
            .is_some()
        {}
        Ok(())
    }
}

/// The little-endian bytes of the values in `raw` (a JSON array, nested or ragged, already checked to be valid
/// JSON) for a tensor of `count` elements of `datatype`, where Python's decoder takes them as they are.
pub fn read_values(raw: &str, datatype: &str, count: usize) -> Option<Vec<u8>> {
    if datatype == "BYTES" {
        return read_strings(raw, count);
    }
    let kind = Kind::of(datatype)?;
    let mut out = Vec::with_capacity(count.checked_mul(kind.size())?.min(raw.len() * 4));
    let mut seen = 0usize;
    let bytes = raw.as_bytes();
    let mut at = 0;
    let mut depth = 0usize;
    while at < bytes.len() {
        match bytes[at] {
            b'[' => {
                depth += 1;
                at += 1;
            }
            b']' => {
                depth = depth.checked_sub(1)?;
                at += 1;
            }
            b',' | b' ' | b'\t' | b'\n' | b'\r' => at += 1,
            b't' | b'f' => {
                let value = bytes[at] == b't';
                at += if value { 4 } else { 5 };
                kind.push_bool(&mut out, value)?;
                seen += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = at;
                let mut integer = true;
                while at < bytes.len()
                    && !matches!(bytes[at], b',' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                {
                    integer &= !matches!(bytes[at], b'.' | b'e' | b'E');
                    at += 1;
                }
                kind.push_number(&mut out, &raw[start..at], integer)?;
                seen += 1;
            }
            _ => return None, // a string, a null, an object: Python's to refuse
        }
        if depth == 0 {
            break; // the outer array closed (or the value was not an array: Python's to refuse)
        }
    }
    (seen == count && count > 0 && bytes.first() == Some(&b'[')).then_some(out)
}

#[derive(Clone, Copy)]
enum Kind {
    Bool,
    Signed(u8, i64, i64),
    Unsigned(u8, u64),
    Fp16,
    Fp32,
    Fp64,
}

impl Kind {
    fn of(datatype: &str) -> Option<Self> {
        Some(match datatype {
            "BOOL" => Kind::Bool,
            "INT8" => Kind::Signed(1, i8::MIN.into(), i8::MAX.into()),
            "INT16" => Kind::Signed(2, i16::MIN.into(), i16::MAX.into()),
            "INT32" => Kind::Signed(4, i32::MIN.into(), i32::MAX.into()),
            "INT64" => Kind::Signed(8, i64::MIN, i64::MAX),
            "UINT8" => Kind::Unsigned(1, u8::MAX.into()),
            "UINT16" => Kind::Unsigned(2, u16::MAX.into()),
            "UINT32" => Kind::Unsigned(4, u32::MAX.into()),
            "UINT64" => Kind::Unsigned(8, u64::MAX),
            "FP16" => Kind::Fp16,
            "FP32" => Kind::Fp32,
            "FP64" => Kind::Fp64,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Kind::Bool => 1,
            Kind::Signed(size, ..) | Kind::Unsigned(size, _) => size.into(),
            Kind::Fp16 => 2,
            Kind::Fp32 => 4,
            Kind::Fp64 => 8,
        }
    }

    fn push_bool(self, out: &mut Vec<u8>, value: bool) -> Option<()> {
        match self {
            Kind::Bool => out.push(value.into()),
            _ => return None, // numpy would make a number of it: Python's to decide
        }
        Some(())
    }

    /// `text` a JSON number; `integer` whether it is written as one (no fraction, no exponent).
    fn push_number(self, out: &mut Vec<u8>, text: &str, integer: bool) -> Option<()> {
        match self {
            Kind::Bool => return None,
            Kind::Signed(size, min, max) => {
                let v: i64 = if integer {
                    text.parse().ok()?
                } else {
                    return None;
                };
                if v < min || v > max {
                    return None;
                }
                out.extend_from_slice(&v.to_le_bytes()[..size.into()]);
            }
            Kind::Unsigned(size, max) => {
                let v: u64 = if integer {
                    text.parse().ok()?
                } else {
                    return None;
                };
                if v > max {
                    return None;
                }
                out.extend_from_slice(&v.to_le_bytes()[..size.into()]);
            }
            Kind::Fp16 | Kind::Fp32 | Kind::Fp64 => {
                // an integer numpy casts to FP16 its own way: only those every half holds exactly
                let exact = if let Kind::Fp16 = self {
                    EXACT_HALF_INT
                } else {
                    EXACT_INT
                };
                let v: f64 = if integer {
                    let n: i64 = text.parse().ok()?;
                    if n.unsigned_abs() > exact {
                        return None;
                    }
                    n as f64
                } else {
                    text.parse().ok()?
                };
                if let Kind::Fp16 = self {
                    out.extend_from_slice(&f64_to_half(v)?.to_le_bytes());
                } else if let Kind::Fp32 = self {
                    let v = v as f32;
                    if !v.is_finite() {
                        return None;
                    }
                    out.extend_from_slice(&v.to_le_bytes());
                } else {
                    if !v.is_finite() {
                        return None;
                    }
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        Some(())
    }
}

/// Appends `[v0,v1,...]`, the values of `bytes` (little-endian `datatype`), as Python's `json` writes
/// `array.tolist()` (no spaces). False where it declines (see the module's note); `out` is then incomplete.
pub fn write_values(out: &mut String, datatype: &str, bytes: &[u8]) -> bool {
    out.push('[');
    let written = match datatype {
        "BOOL" => each(out, bytes, |out, [b]: [u8; 1]| {
            out.push_str(if b != 0 { "true" } else { "false" });
            true
        }),
        "INT8" => integers(out, bytes, i8::from_le_bytes),
        "INT16" => integers(out, bytes, i16::from_le_bytes),
        "INT32" => integers(out, bytes, i32::from_le_bytes),
        "INT64" => integers(out, bytes, i64::from_le_bytes),
        "UINT8" => integers(out, bytes, u8::from_le_bytes),
        "UINT16" => integers(out, bytes, u16::from_le_bytes),
        "UINT32" => integers(out, bytes, u32::from_le_bytes),
        "UINT64" => integers(out, bytes, u64::from_le_bytes),
        "FP16" => each(out, bytes, |out, b| {
            python_float(out, half_to_f64(u16::from_le_bytes(b)))
        }),
        "FP32" => each(out, bytes, |out, b| {
            python_float(out, f32::from_le_bytes(b).into())
        }),
        "FP64" => each(out, bytes, |out, b| {
            python_float(out, f64::from_le_bytes(b))
        }),
        _ => false,
    };
    out.push(']');
    written
}

fn each<const N: usize>(
    out: &mut String,
    bytes: &[u8],
    mut write: impl FnMut(&mut String, [u8; N]) -> bool,
) -> bool {
    if !bytes.len().is_multiple_of(N) {
        return false;
    }
    for (i, chunk) in bytes.chunks_exact(N).enumerate() {
        if i > 0 {
            out.push(',');
        }
        let Ok(value) = <[u8; N]>::try_from(chunk) else {
            return false;
        };
        if !write(out, value) {
            return false;
        }
    }
    true
}

fn integers<const N: usize, T: std::fmt::Display>(
    out: &mut String,
    bytes: &[u8],
    read: fn([u8; N]) -> T,
) -> bool {
    each(out, bytes, |out, b| {
        let _ = write!(out, "{}", read(b));
        true
    })
}

/// An IEEE half's value as a double (exact: every half is one).
fn half_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let fraction = f64::from(bits & 0x3ff);
    sign * match exponent {
        0 => fraction * 2f64.powi(-24),
        31 if fraction == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + fraction / 1024.0) * 2f64.powi(e - 15),
    }
}

/// `v` as Python's `repr(float)` writes it (the shortest digits that read back as `v`; positional from 1e-4 up
/// to 1e16, else `d.ddde+XX`). False for NaN and the infinities, which JSON cannot carry.
pub fn python_float(out: &mut String, v: f64) -> bool {
    if !v.is_finite() {
        return false;
    }
    if v == 0.0 {
        out.push_str(if v.is_sign_negative() { "-0.0" } else { "0.0" });
        return true;
    }
    // ryu's digits are Python's: the shortest that read back as `v`, an exact tie to the even one (Rust's own
    // `{:e}` takes the upper one of a tie); only their layout differs
    let mut buffer = ryu::Buffer::new();
    let written = buffer.format_finite(v.abs());
    let (mantissa, exponent) = written.split_once('e').unwrap_or((written, "0"));
    let Ok(exponent) = exponent.parse::<i32>() else {
        return false;
    };
    // its digits without the point, in a buffer of the stack; `whole` of them before the point
    let whole = mantissa.find('.').unwrap_or(mantissa.len()) as i32;
    let mut all = [0u8; 40];
    let mut count = 0usize;
    for byte in mantissa.bytes().filter(|b| *b != b'.') {
        let Some(slot) = all.get_mut(count) else {
            return false;
        };
        *slot = byte;
        count += 1;
    }
    let leading = all[..count].iter().take_while(|&&d| d == b'0').count();
    let trailing = all[leading..count]
        .iter()
        .rev()
        .take_while(|&&d| d == b'0')
        .count();
    let Ok(digits) = std::str::from_utf8(&all[leading..count - trailing]) else {
        return false;
    };
    if v < 0.0 {
        out.push('-');
    }
    let point = whole - leading as i32 + exponent; // v = 0.digits * 10^point
    if !(-4 < point && point <= 16) {
        let exponent = point - 1;
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exponent < 0 { '-' } else { '+' },
            exponent.unsigned_abs()
        );
    } else if point <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', point.unsigned_abs() as usize));
        out.push_str(digits);
    } else {
        let point = point as usize;
        if point < digits.len() {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        } else {
            out.push_str(digits);
            out.extend(std::iter::repeat_n('0', point - digits.len()));
            out.push_str(".0");
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float(v: f64) -> String {
        let mut out = String::new();
        assert!(python_float(&mut out, v));
        out
    }

    #[test]
    fn floats_are_written_as_python_repr_writes_them() {
        let cases = [
            (0.1, "0.1"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (f64::from(0.1f32), "0.10000000149011612"),
            (f64::from(0.904_457_1_f32), "0.9044570922851562"), // a tie: the even digit
            (0.3, "0.3"),
            (2.0f64.powi(60), "1.152921504606847e+18"),
            (100.0, "100.0"),
            (12.34, "12.34"),
            (0.000123, "0.000123"),
        ];
        for (v, text) in cases {
            assert_eq!(float(v), text, "{v:e}");
        }
        let mut out = String::new();
        assert!(!python_float(&mut out, f64::NAN) && !python_float(&mut out, f64::INFINITY));
    }

    #[test]
    fn values_are_written_from_their_bytes() {
        let mut out = String::new();
        let bytes: Vec<u8> = [1.5f32, -0.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert!(write_values(&mut out, "FP32", &bytes));
        assert_eq!(out, "[1.5,-0.25]");
        out.clear();
        assert!(write_values(&mut out, "UINT64", &u64::MAX.to_le_bytes()));
        assert_eq!(out, "[18446744073709551615]");
        out.clear();
        assert!(write_values(&mut out, "BOOL", &[1, 0]));
        assert_eq!(out, "[true,false]");
        out.clear();
        assert!(write_values(&mut out, "FP16", &0x3555u16.to_le_bytes())); // float16(1/3)
        assert_eq!(out, "[0.333251953125]");
        out.clear();
        assert!(write_values(&mut out, "INT8", &[]));
        assert_eq!(out, "[]");
        for (datatype, bytes) in [
            ("FP32", f32::NAN.to_le_bytes().to_vec()),
            ("FP64", f64::INFINITY.to_le_bytes().to_vec()),
            ("FP16", 0x7c00u16.to_le_bytes().to_vec()),
            ("BYTES", vec![0, 0, 0, 0]),
            ("INT32", vec![0, 0, 0]),
        ] {
            assert!(
                !write_values(&mut String::new(), datatype, &bytes),
                "{datatype}"
            );
        }
    }

    fn read(raw: &str, datatype: &str, count: usize) -> Option<Vec<u8>> {
        read_values(raw, datatype, count)
    }

    #[test]
    fn numbers_are_read_nested_or_ragged_in_row_major_order() {
        let expected: Vec<u8> = [1i32, 2, 3, 4]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        for raw in [
            "[1,2,3,4]",
            "[[1,2],[3,4]]",
            "[ [1 ,[2]], [], 3,\n4 ]",
            "[[[1]],2,[[3,[4]]]]",
        ] {
            assert_eq!(
                read(raw, "INT32", 4).as_deref(),
                Some(&expected[..]),
                "{raw}"
            );
        }
        let floats: Vec<u8> = [0.1f32, 2.0, -3e-3, 16777216.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(read("[0.1,2,-3e-3,16777217]", "FP32", 4), Some(floats));
        let doubles: Vec<u8> = [0.1f64, -0.0, 1e-400]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(read("[0.1,-0.0,1e-400]", "FP64", 3), Some(doubles));
        assert_eq!(read("[true,false]", "BOOL", 2), Some(vec![1, 0]));
        assert_eq!(read("[255,0]", "UINT8", 2), Some(vec![255, 0]));
        assert_eq!(read("[-128]", "INT8", 1), Some(vec![0x80]));
        assert_eq!(
            read("[18446744073709551615]", "UINT64", 1),
            Some(vec![0xff; 8])
        );
        let halves: Vec<u8> = [
            0x3c00u16, 0xc000, 0x3555, 0x0001, 0x0000, 0x8000, 0x7bff, 0x0400, 0x6800,
        ]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
        let raw = "[1,-2,0.33333,6e-8,2.9e-8,-1e-30,65504.0,6.103515625e-5,2048]";
        assert_eq!(read(raw, "FP16", 9), Some(halves));
        let strings = b"\x02\0\0\0ab\x02\0\0\0\xc3\xa9\0\0\0\0";
        assert_eq!(
            read(r#"[["ab"], ["\u00e9", [""]]]"#, "BYTES", 3).as_deref(),
            Some(&strings[..])
        );
    }

    #[test]
    fn halves_round_to_the_nearest_even_as_numpy_does() {
        let cases = [
            (1.0 + 1.0 / 2048.0, Some(0x3c00)),   // a tie: the even one (down)
            (1.0 + 3.0 / 2048.0, Some(0x3c02)),   // a tie: the even one (up)
            (65519.99, Some(0x7bff)),             // just below the tie with infinity
            (65520.0, None),                      // the tie with infinity: infinity
            (2f64.powi(-25), Some(0x0000)),       // half the smallest subnormal: to even, zero
            (2f64.powi(-25) * 1.5, Some(0x0001)), // past it
            (2f64.powi(-24) * 1.5, Some(0x0002)), // a subnormal tie: the even one
            (2f64.powi(-14) - 2f64.powi(-26), Some(0x0400)), // up into the smallest normal
        ];
        for (v, half) in cases {
            assert_eq!(f64_to_half(v), half, "{v:e}");
        }
    }

    #[test]
    fn anything_else_is_left_to_python() {
        let refused = [
            ("[1,2,3]", "INT32", 4),               // the wrong count
            ("[1,2]", "INT32", 1),                 // the wrong count
            ("[]", "INT32", 0),                    // nothing to read
            ("[1.0]", "INT32", 1),                 // a float in an integer tensor
            ("[1e2]", "INT64", 1),                 // a float in an integer tensor
            ("[128]", "INT8", 1),                  // out of range
            ("[-1]", "UINT8", 1),                  // out of range
            ("[9223372036854775808]", "INT64", 1), // out of range
            ("[true]", "INT32", 1),                // numpy makes numbers of bools
            ("[1, true]", "FP32", 2),              // numpy makes numbers of bools
            ("[1]", "BOOL", 1),                    // a number in a bool tensor
            ("[\"a\"]", "FP32", 1),                // a string
            ("[null]", "FP32", 1),                 // a null
            ("[{}]", "FP32", 1),                   // an object
            ("[1e39]", "FP32", 1),                 // past FP32
            ("[1e400]", "FP64", 1),                // past FP64
            ("[9007199254740993]", "FP64", 1),     // an integer a double does not hold
            ("[\"a\", 1]", "BYTES", 2),            // a number among strings
            ("[\"a\"]", "BYTES", 2),               // the wrong count
            ("[1e5]", "FP16", 1),                  // past FP16
            ("[4097]", "FP16", 1),                 // an integer numpy casts its own way
            ("1", "FP32", 1),                      // not an array
        ];
        for (raw, datatype, count) in refused {
            assert_eq!(read(raw, datatype, count), None, "{raw} as {datatype}");
        }
    }
}
