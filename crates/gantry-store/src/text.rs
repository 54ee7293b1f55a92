//! Stored free text is capped. Hold and release reasons, event messages and task reasons
//! carry what others sent (an alert's summary, an administrator's reason, an agent's error),
//! and a row is read by every listing that shows it: a 1.5 MB summary would be served to
//! every `node list`. The store is the one writer, so the cap holds for every path.

use std::borrow::Cow;

/// The most bytes of free text a field keeps, the marker included.
pub const MAX_TEXT_BYTES: usize = 4096;

/// `text` as stored: whole when it fits in [`MAX_TEXT_BYTES`], else cut on a character
/// boundary and marked with how long it was: `"... (truncated, 1500000 bytes)"`.
pub fn cap_text(text: &str) -> Cow<'_, str> {
    cap_to(text, MAX_TEXT_BYTES)
}

fn cap_to(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let marker = format!("… (truncated, {} bytes)", text.len());
    let mut keep = max.saturating_sub(marker.len());
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    Cow::Owned(format!("{}{marker}", &text[..keep]))
}

/// [`cap_text`] for an optional field.
pub fn cap_opt(text: &Option<String>) -> Option<Cow<'_, str>> {
    text.as_deref().map(cap_text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_whole() {
        assert!(matches!(cap_text("disk full"), Cow::Borrowed("disk full")));
        let exact = "x".repeat(MAX_TEXT_BYTES);
        assert_eq!(cap_text(&exact), exact);
    }

    #[test]
    fn long_text_is_cut_on_a_character_boundary_and_marked() {
        let long = "é".repeat(750_000); // 1.5 MB of two-byte characters
        let got = cap_text(&long);
        assert!(got.len() <= MAX_TEXT_BYTES, "{}", got.len());
        assert!(got.ends_with("… (truncated, 1500000 bytes)"), "{got}");
        assert!(got.starts_with("éé"));
        // Whatever the characters' widths, the cut keeps a prefix of whole characters and
        // the result stays within the limit.
        for s in ["a", "é", "€", "😀"] {
            let text = s.repeat(20);
            for max in 40..text.len() + 8 {
                let got = cap_to(&text, max);
                if text.len() <= max {
                    assert_eq!(got, text);
                    continue;
                }
                assert!(got.len() <= max, "{max}: {got:?}");
                let (kept, _) = got.split_once('…').unwrap();
                assert!(text.starts_with(kept), "{max}: {got:?}");
                assert!(got.ends_with(&format!("(truncated, {} bytes)", text.len())));
            }
        }
    }
}
