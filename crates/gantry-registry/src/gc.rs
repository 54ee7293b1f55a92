//! What the cache keeps: the size limit (least recently used tags go first) and which blobs
//! nothing references any more. Pure functions over rows; `Registry` applies them.

use std::collections::{HashMap, HashSet};

use gantry_store::{ImageKey, ImageRow};

/// manifest → what it references.
pub type Edges = HashMap<String, Vec<String>>;

pub fn edges(pairs: Vec<(String, String)>) -> Edges {
    let mut out: Edges = HashMap::new();
    for (m, c) in pairs {
        out.entry(m).or_default().push(c);
    }
    out
}

/// Every digest reachable from `roots` (the roots included).
pub fn closure<'a>(roots: impl IntoIterator<Item = &'a str>, edges: &Edges) -> HashSet<String> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut stack: Vec<String> = roots.into_iter().map(str::to_string).collect();
    while let Some(d) = stack.pop() {
        if !seen.insert(d.clone()) {
            continue;
        }
        if let Some(children) = edges.get(&d) {
            stack.extend(children.iter().filter(|c| !seen.contains(*c)).cloned());
        }
    }
    seen
}

/// The tags to evict, least recently used first, until what the remaining tags reference (each
/// blob once) fits in `limit` bytes. `keep` (the tag just pushed) is never evicted.
pub fn plan_eviction(
    images: &[ImageRow],
    edges: &Edges,
    sizes: &HashMap<String, i64>,
    limit: u64,
    keep: Option<&ImageKey>,
) -> Vec<ImageKey> {
    let closures: Vec<HashSet<String>> = images
        .iter()
        .map(|i| closure([i.digest.as_str()], edges))
        .collect();
    let mut refcount: HashMap<&str, u32> = HashMap::new();
    for c in &closures {
        for d in c {
            *refcount.entry(d.as_str()).or_default() += 1;
        }
    }
    let size = |d: &str| sizes.get(d).copied().unwrap_or(0).max(0) as u64;
    let mut total: u64 = refcount.keys().map(|d| size(d)).sum();
    let mut order: Vec<usize> = (0..images.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&images[a], &images[b]);
        (a.last_used_at, a.created_at, &a.key).cmp(&(b.last_used_at, b.created_at, &b.key))
    });
    let mut evicted = vec![];
    for i in order {
        if total <= limit {
            break;
        }
        if Some(&images[i].key) == keep {
            continue;
        }
        for d in &closures[i] {
            if let Some(n) = refcount.get_mut(d.as_str()) {
                *n -= 1;
                if *n == 0 {
                    total -= size(d);
                }
            }
        }
        evicted.push(images[i].key.clone());
    }
    evicted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(tag: &str, digest: &str, last_used: i64) -> ImageRow {
        ImageRow {
            key: ImageKey {
                scope: "user".into(),
                owner: "alice".into(),
                name: "x".into(),
                tag: tag.into(),
            },
            digest: digest.into(),
            media_type: String::new(),
            size: 0,
            created_at: 0,
            last_used_at: last_used,
            build_key: None,
        }
    }

    fn setup() -> (Edges, HashMap<String, i64>) {
        let e = edges(vec![
            ("ma".into(), "base".into()),
            ("ma".into(), "la".into()),
            ("mb".into(), "base".into()),
            ("mb".into(), "lb".into()),
            ("idx".into(), "mb".into()),
        ]);
        let sizes = [
            ("ma", 1),
            ("mb", 1),
            ("idx", 1),
            ("base", 100),
            ("la", 10),
            ("lb", 20),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        (e, sizes)
    }

    #[test]
    fn closures_follow_indexes() {
        let (e, _) = setup();
        let c = closure(["idx"], &e);
        let want: HashSet<String> = ["idx", "mb", "base", "lb"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(c, want);
    }

    #[test]
    fn evicts_least_recently_used_until_it_fits() {
        let (e, sizes) = setup();
        let images = vec![img("a", "ma", 5), img("b", "mb", 1), img("i", "idx", 3)];
        // Everything: 1+1+1+100+10+20 = 133.
        assert!(plan_eviction(&images, &e, &sizes, 133, None).is_empty());
        // b goes first, but idx still holds mb and lb: then idx goes too.
        let out = plan_eviction(&images, &e, &sizes, 111, None);
        let tags: Vec<&str> = out.iter().map(|k| k.tag.as_str()).collect();
        assert_eq!(tags, ["b", "i"]);
        // The tag just pushed stays even when it alone is over the limit.
        let keep = images[0].key.clone();
        let out = plan_eviction(&images, &e, &sizes, 1, Some(&keep));
        let tags: Vec<&str> = out.iter().map(|k| k.tag.as_str()).collect();
        assert_eq!(tags, ["b", "i"]);
    }
}
