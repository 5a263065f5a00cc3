//! Status timestamps ("Status timestamps"): RFC 3339 UTC with milliseconds and
//! a `Z` on the way out; any RFC 3339 offset on the way in (ListTasks'
//! statusTimestampAfter).

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Milliseconds since the Unix epoch, displayed and serialized as
/// `2026-10-13T09:00:00.123Z` (written in place, with no string of its own).
pub struct Rfc3339Ms(pub i64);

impl Rfc3339Ms {
    /// The text, written digit by digit: every response carries a
    /// timestamp or more, and `write!` with seven padded numbers, escaped
    /// piece by piece through serde's `collect_str`, was a visible share of
    /// a short request's time in wasm. None for a year outside 0000–9999.
    fn text(&self) -> Option<[u8; 24]> {
        let at = self.at();
        let year = u16::try_from(at.year()).ok().filter(|y| *y <= 9999)?;
        let mut text = *b"0000-00-00T00:00:00.000Z";
        let fields = [
            (0, 4, year),
            (5, 2, u16::from(u8::from(at.month()))),
            (8, 2, u16::from(at.day())),
            (11, 2, u16::from(at.hour())),
            (14, 2, u16::from(at.minute())),
            (17, 2, u16::from(at.second())),
            (20, 3, at.millisecond()),
        ];
        for (at, width, mut value) in fields {
            for digit in text[at..at + width].iter_mut().rev() {
                *digit = b'0' + (value % 10) as u8;
                value /= 10;
            }
        }
        Some(text)
    }

    /// The time, or the epoch past what the time crate holds.
    fn at(&self) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.0) * 1_000_000)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH)
    }
}

/// `at` written with padded numbers: the text of a year outside
/// 0000–9999, and what the digits are tested against.
fn write_padded(out: &mut impl std::fmt::Write, at: OffsetDateTime) -> std::fmt::Result {
    write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.millisecond()
    )
}

impl serde::Serialize for Rfc3339Ms {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.text() {
            // ASCII digits and separators: valid UTF-8, nothing to escape.
            Some(text) => serializer.serialize_str(std::str::from_utf8(&text).unwrap_or_default()),
            None => serializer.collect_str(self),
        }
    }
}

impl std::fmt::Display for Rfc3339Ms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.text() {
            Some(text) => f.write_str(std::str::from_utf8(&text).unwrap_or_default()),
            None => write_padded(f, self.at()),
        }
    }
}

/// The first whole millisecond at or after an RFC 3339 timestamp, so that
/// "status.timestamp at or after it" compares in milliseconds without losing
/// a finer cutoff. None when `text` is not RFC 3339.
pub fn parse_cutoff_ms(text: &str) -> Option<i64> {
    let nanos = OffsetDateTime::parse(text, &Rfc3339)
        .ok()?
        .unix_timestamp_nanos();
    let ms = nanos.div_euclid(1_000_000) + i128::from(nanos.rem_euclid(1_000_000) != 0);
    i64::try_from(ms).ok()
}

/// An HTTP-date (IMF-fixdate, RFC 9110 5.6.7) of a time in milliseconds,
/// to the second: `Sun, 06 Nov 1994 08:49:37 GMT`.
pub fn http_date(ms: i64) -> String {
    let at = OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        &at.weekday().to_string()[..3],
        at.day(),
        &at.month().to_string()[..3],
        at.year(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// The seconds since the epoch of an IMF-fixdate; None for anything else
/// (an invalid date is ignored, RFC 9110 13.1.3).
pub fn parse_http_date(text: &str) -> Option<i64> {
    let format = time::format_description::parse_borrowed::<2>(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT",
    )
    .ok()?;
    let at = time::PrimitiveDateTime::parse(text.trim(), &format).ok()?;
    Some(at.assume_utc().unix_timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 9110 5.6.7's example.
    #[test]
    fn http_dates_are_imf_fixdates() {
        assert_eq!(http_date(784_111_777_000), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(784_111_777_999), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        assert_eq!(parse_http_date("yesterday"), None);
    }

    // "Status timestamps": RFC 3339 UTC with milliseconds and a Z.
    #[test]
    fn formats_with_milliseconds_and_z() {
        assert_eq!(
            Rfc3339Ms(1_760_346_000_123).to_string(),
            "2025-10-13T09:00:00.123Z"
        );
        assert_eq!(Rfc3339Ms(0).to_string(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            Rfc3339Ms(1_760_346_000_000).to_string(),
            "2025-10-13T09:00:00.000Z"
        );
        // The last millisecond of a leap year, and of year 9999.
        assert_eq!(
            Rfc3339Ms(1_735_689_599_999).to_string(),
            "2024-12-31T23:59:59.999Z"
        );
        assert_eq!(
            Rfc3339Ms(253_402_300_799_999).to_string(),
            "9999-12-31T23:59:59.999Z"
        );
        // Before the epoch, and past what the time crate holds (the epoch).
        assert_eq!(Rfc3339Ms(-1).to_string(), "1969-12-31T23:59:59.999Z");
        assert_eq!(Rfc3339Ms(i64::MAX).to_string(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            serde_json::to_string(&Rfc3339Ms(1_760_346_000_123)).unwrap(),
            "\"2025-10-13T09:00:00.123Z\""
        );
    }

    // Digit by digit, as `write!` with padded numbers would write it.
    #[test]
    fn writes_what_padded_numbers_would() {
        let mut ms = -62_135_596_800_000; // 0001-01-01T00:00:00.000Z
        while ms < 253_402_300_800_000 {
            let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap();
            let mut padded = String::new();
            write_padded(&mut padded, at).unwrap();
            assert_eq!(Rfc3339Ms(ms).to_string(), padded);
            ms += 7_777_777_777;
        }
    }

    // "ListTasks": statusTimestampAfter in any offset, inclusive.
    #[test]
    fn parses_any_offset() {
        let at = 1_760_346_000_123;
        assert_eq!(parse_cutoff_ms("2025-10-13T09:00:00.123Z"), Some(at));
        assert_eq!(parse_cutoff_ms("2025-10-13T11:00:00.123+02:00"), Some(at));
        assert_eq!(parse_cutoff_ms("2025-10-13T04:30:00.123-04:30"), Some(at));
        assert_eq!(
            parse_cutoff_ms("2025-10-13T09:00:00Z"),
            Some(1_760_346_000_000)
        );
        // A finer cutoff rounds up: .1231 excludes a task at .123.
        assert_eq!(parse_cutoff_ms("2025-10-13T09:00:00.1231Z"), Some(at + 1));
        assert_eq!(parse_cutoff_ms(&Rfc3339Ms(at).to_string()), Some(at));
    }

    #[test]
    fn refuses_what_is_not_rfc_3339() {
        for text in [
            "",
            "2025-10-13",
            "2025-10-13T09:00:00",
            "yesterday",
            "1760346000",
        ] {
            assert_eq!(parse_cutoff_ms(text), None, "{text}");
        }
    }
}
