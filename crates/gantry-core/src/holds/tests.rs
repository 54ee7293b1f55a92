use super::*;

fn alert(fp: &str, ep: &str, firing: bool, node: &str, release: Release) -> Alert {
    Alert {
        fingerprint: fp.into(),
        starts_at: ep.into(),
        firing,
        node: node.into(),
        kind: HoldType::Cordon,
        release,
    }
}

fn hold(id: u128, node: &str, fp: &str, ep: &str, state: HoldState, release: Release) -> Hold {
    Hold {
        id,
        node: node.into(),
        kind: HoldType::Cordon,
        admin: None,
        state,
        fingerprint: Some(fp.into()),
        episode: Some(ep.into()),
        release,
        created_at: id as i64,
    }
}

fn pool(nodes: u32, held: &[&str]) -> PoolView {
    PoolView {
        nodes,
        held: held.iter().map(|s| s.to_string()).collect(),
        fraction: 0.2,
    }
}

#[test]
fn the_cap_is_a_fifth_of_the_pool_but_at_least_one() {
    assert_eq!(cap(1, 0.2), 1);
    assert_eq!(cap(4, 0.2), 1);
    assert_eq!(cap(5, 0.2), 1);
    assert_eq!(cap(10, 0.2), 2);
    assert_eq!(cap(14, 0.2), 2);
    assert_eq!(cap(15, 0.2), 3);
    assert_eq!(cap(10, 0.5), 5);
    assert_eq!(cap(10, f64::NAN), 2);
    assert_eq!(cap(0, 0.2), 1);
}

#[test]
fn a_firing_alert_places_an_active_hold_within_the_cap() {
    let a = alert("f1", "t1", true, "n1", Release::Auto);
    assert_eq!(
        decide(&a, &[], false, &pool(5, &[])),
        Decision::Place {
            state: HoldState::Active
        }
    );
}

#[test]
fn past_the_cap_the_hold_is_deferred() {
    let a = alert("f2", "t1", true, "n2", Release::Auto);
    assert_eq!(
        decide(&a, &[], false, &pool(5, &["n1"])),
        Decision::Place {
            state: HoldState::Deferred
        }
    );
}

#[test]
fn a_node_already_held_takes_another_hold_without_counting_twice() {
    let a = alert("f2", "t1", true, "n1", Release::Auto);
    assert_eq!(
        decide(&a, &[], false, &pool(5, &["n1"])),
        Decision::Place {
            state: HoldState::Active
        }
    );
}

#[test]
fn duplicates_and_repeats_change_nothing() {
    let a = alert("f1", "t1", true, "n1", Release::Auto);
    let h = [hold(1, "n1", "f1", "t1", HoldState::Active, Release::Auto)];
    assert!(matches!(
        decide(&a, &h, false, &pool(5, &["n1"])),
        Decision::Nothing { .. }
    ));
    let deferred = [hold(
        1,
        "n1",
        "f1",
        "t1",
        HoldState::Deferred,
        Release::Auto,
    )];
    assert!(matches!(
        decide(&a, &deferred, false, &pool(5, &["n9"])),
        Decision::Nothing { .. }
    ));
}

#[test]
fn a_firing_post_for_an_ended_episode_is_ignored() {
    let a = alert("f1", "t1", true, "n1", Release::Auto);
    assert!(matches!(
        decide(&a, &[], true, &pool(5, &[])),
        Decision::Nothing { .. }
    ));
}

#[test]
fn resolve_releases_an_auto_hold_and_waits_for_an_admin_otherwise() {
    let r = alert("f1", "t1", false, "n1", Release::Auto);
    let auto = [hold(1, "n1", "f1", "t1", HoldState::Active, Release::Auto)];
    assert_eq!(
        decide(&r, &auto, false, &pool(5, &["n1"])),
        Decision::Release { holds: vec![1] }
    );
    let admin = [hold(1, "n1", "f1", "t1", HoldState::Active, Release::Admin)];
    assert_eq!(
        decide(&r, &admin, false, &pool(5, &["n1"])),
        Decision::AwaitAdmin { holds: vec![1] }
    );
}

#[test]
fn resolve_drops_a_deferred_hold_even_when_an_admin_must_release() {
    let r = alert("f1", "t1", false, "n1", Release::Admin);
    let h = [hold(
        1,
        "n1",
        "f1",
        "t1",
        HoldState::Deferred,
        Release::Admin,
    )];
    assert_eq!(
        decide(&r, &h, false, &pool(5, &["n9"])),
        Decision::Release { holds: vec![1] }
    );
}

#[test]
fn resolve_of_another_episode_does_not_touch_the_hold() {
    let r = alert("f1", "t0", false, "n1", Release::Auto);
    let h = [hold(1, "n1", "f1", "t1", HoldState::Active, Release::Auto)];
    assert!(matches!(
        decide(&r, &h, false, &pool(5, &["n1"])),
        Decision::Nothing { .. }
    ));
}

#[test]
fn monitoring_never_releases_an_admins_hold() {
    let r = alert("f1", "t1", false, "n1", Release::Auto);
    let mut h = hold(1, "n1", "f1", "t1", HoldState::Active, Release::Auto);
    h.admin = Some("root".into());
    assert!(matches!(
        decide(&r, &[h], false, &pool(5, &["n1"])),
        Decision::Nothing { .. }
    ));
}

#[test]
fn deferred_holds_are_promoted_oldest_first_as_room_frees() {
    let holds = [
        hold(3, "n3", "f3", "t", HoldState::Deferred, Release::Auto),
        hold(2, "n2", "f2", "t", HoldState::Deferred, Release::Auto),
    ];
    assert_eq!(promotions(&holds, &pool(5, &[])), vec![2]);
    assert!(promotions(&holds, &pool(5, &["n1"])).is_empty());
    assert_eq!(promotions(&holds, &pool(10, &[])), vec![2, 3]);
}

#[test]
fn a_deferred_hold_on_an_already_held_node_is_promoted() {
    let holds = [hold(2, "n1", "f2", "t", HoldState::Deferred, Release::Auto)];
    assert_eq!(promotions(&holds, &pool(5, &["n1"])), vec![2]);
}

#[test]
fn node_state_prefers_evict() {
    let mut c = hold(1, "n1", "f", "t", HoldState::Active, Release::Auto);
    let mut e = c.clone();
    e.kind = HoldType::Evict;
    assert_eq!(node_state(&[c.clone(), e.clone()]), Some(HoldType::Evict));
    assert_eq!(node_state(std::slice::from_ref(&c)), Some(HoldType::Cordon));
    c.state = HoldState::Deferred;
    e.state = HoldState::Released;
    assert_eq!(node_state(&[c, e]), None);
}
