//! Which KServe v2 datatype a buffer's element format stands for (PEP 3118 format strings, as numpy exports
//! arrays), so that an answer's arrays can be written to the wire without Python naming each datatype.
//!
//! Only what `dtypes.numpy_to_wire` maps is recognised: native-order booleans, integers and floats of the sizes
//! Triton has. Anything else (big-endian, long double, complex, records, objects) is `None`, and the answer
//! takes Python's path, which names it or refuses it with its own message.

/// The wire datatype of elements of `format` and `itemsize` bytes, where the format is one numpy exports for a
/// dtype that `dtypes.numpy_to_wire` maps.
pub fn wire_datatype(format: &str, itemsize: usize) -> Option<&'static str> {
    // a byte-order prefix that keeps this machine's order ('@' and '=' native, '<' little-endian)
    let code = match format.as_bytes() {
        [code] => *code,
        [b'@' | b'=', code] => *code,
        [b'<', code] if cfg!(target_endian = "little") => *code,
        [b'>' | b'!', code] if cfg!(target_endian = "big") => *code,
        _ => return None,
    };
    let named = match code {
        b'?' => [Some("BOOL"), None, None, None],
        b'b' | b'h' | b'i' | b'l' | b'q' => {
            [Some("INT8"), Some("INT16"), Some("INT32"), Some("INT64")]
        }
        b'B' | b'H' | b'I' | b'L' | b'Q' => [
            Some("UINT8"),
            Some("UINT16"),
            Some("UINT32"),
            Some("UINT64"),
        ],
        // a float's letter gives its size in every mode
        b'e' if itemsize == 2 => return Some("FP16"),
        b'f' if itemsize == 4 => return Some("FP32"),
        b'd' if itemsize == 8 => return Some("FP64"),
        _ => return None,
    };
    let slot = match itemsize {
        1 => 0,
        2 => 1,
        4 => 2,
        8 => 3,
        _ => return None,
    };
    named[slot]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_native_formats_name_their_datatypes() {
        // what numpy exports on x86-64 Linux for each dtype dtypes.numpy_to_wire maps
        let cases = [
            ("?", 1, "BOOL"),
            ("b", 1, "INT8"),
            ("h", 2, "INT16"),
            ("i", 4, "INT32"),
            ("l", 8, "INT64"),
            ("q", 8, "INT64"),
            ("B", 1, "UINT8"),
            ("H", 2, "UINT16"),
            ("I", 4, "UINT32"),
            ("L", 8, "UINT64"),
            ("Q", 8, "UINT64"),
            ("e", 2, "FP16"),
            ("f", 4, "FP32"),
            ("d", 8, "FP64"),
        ];
        for (format, itemsize, wire) in cases {
            assert_eq!(
                wire_datatype(format, itemsize),
                Some(wire),
                "{format} {itemsize}"
            );
        }
    }

    #[test]
    fn the_size_decides_not_the_letter() {
        // '<l' is the standard 4-byte long: its item size says so
        assert_eq!(wire_datatype("<l", 4), Some("INT32"));
        assert_eq!(wire_datatype("=q", 8), Some("INT64"));
        assert_eq!(wire_datatype("@f", 4), Some("FP32"));
    }

    #[test]
    fn what_numpy_to_wire_does_not_map_is_none() {
        let others = [
            (">f", 4),      // big-endian: Python's path refuses it
            ("!i", 4),      // network order
            ("g", 16),      // long double
            ("Zf", 8),      // complex
            ("O", 8),       // objects (BYTES takes Python's path)
            ("3s", 3),      // fixed-size bytes
            ("T{f:a:}", 4), // a record
            ("?", 2),       // no 2-byte bool
            ("e", 4),       // a half that is not 2 bytes
            ("", 1),
        ];
        for (format, itemsize) in others {
            assert_eq!(wire_datatype(format, itemsize), None, "{format} {itemsize}");
        }
    }
}
