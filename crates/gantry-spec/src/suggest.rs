//! "Did you mean" for misspelt keys and names.

/// Levenshtein distance over chars.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// `dependsOn` and `depends_on` -> `depends-on`.
pub(crate) fn kebab(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c == '_' {
            out.push('-');
        } else if c.is_ascii_uppercase() {
            if !out.is_empty() && !out.ends_with('-') {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The closest candidate, if it is close enough to be a likely typo.
pub(crate) fn suggest<'a, I>(word: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let lower = word.to_lowercase();
    let limit = match word.chars().count() {
        0..=3 => 1,
        4..=8 => 2,
        n => n / 3,
    };
    candidates
        .into_iter()
        .map(|c| (distance(&lower, &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, c)| (*d, *c))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levenshtein() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("same", "same"), 0);
        assert_eq!(distance("imgae", "image"), 2);
    }

    #[test]
    fn kebab_case() {
        assert_eq!(kebab("dependsOn"), "depends-on");
        assert_eq!(kebab("task_array"), "task-array");
        assert_eq!(kebab("byCore"), "by-core");
        assert_eq!(kebab("image"), "image");
    }

    #[test]
    fn suggestions() {
        let keys = ["image", "command", "script", "env"];
        assert_eq!(suggest("imgae", keys), Some("image"));
        assert_eq!(suggest("comand", keys), Some("command"));
        assert_eq!(suggest("Env", keys), Some("env"));
        assert_eq!(suggest("xyz", keys), None);
        assert_eq!(suggest("environment", keys), None);
    }
}
