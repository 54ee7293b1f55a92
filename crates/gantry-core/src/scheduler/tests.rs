use super::*;

const GIB: u64 = 1 << 30;
const GPU: &str = "nvidia.com/gpu";
const DISKFULL: &str = "cordoned: hold by monitoring (DiskFull)";

/// An empty, schedulable node with `cores` cores and `gib` GiB.
fn node(id: &str, pool: &str, cores: u64, gib: u64) -> NodeView {
    NodeView::new(id, pool, Res::new(cores * 1000, gib * GIB))
}

fn gpus(mut n: NodeView, count: u32) -> NodeView {
    n.total.devices.insert(GPU.into(), count);
    n
}

/// Marks `millis` cores and `gib` GiB as used by `running` attempts.
fn busy(mut n: NodeView, millis: u64, gib: u64, running: u32) -> NodeView {
    n.used.millicpus = millis;
    n.used.memory_bytes = gib * GIB;
    n.running = running;
    n
}

fn held(mut n: NodeView, reason: Option<&str>) -> NodeView {
    n.schedulable = false;
    n.unschedulable_reason = reason.map(str::to_owned);
    n
}

fn req(key: u64, pool: Option<&str>, millis: u64, gib: u64) -> TaskRequest<u64> {
    TaskRequest::new(key, pool.map(str::to_owned), Res::new(millis, gib * GIB))
}

fn gpu_req(key: u64, pool: Option<&str>, millis: u64, count: u32) -> TaskRequest<u64> {
    let mut r = req(key, pool, millis, 0);
    r.need.devices.insert(GPU.into(), count);
    r
}

fn exclusive(mut r: TaskRequest<u64>) -> TaskRequest<u64> {
    r.exclusive = true;
    r
}

/// (key, node name) of each placement of one member.
fn placed(plan: &Plan<u64>) -> Vec<(u64, &str)> {
    plan.placements
        .iter()
        .map(|p| {
            assert_eq!(p.members(), 1, "{} has {} members", p.key, p.members());
            (p.key, p.node.as_str())
        })
        .collect()
}

/// The only unplaced request's kind and reason.
fn only_unplaced(plan: &Plan<u64>) -> (UnplacedKind, &str) {
    assert_eq!(plan.unplaced.len(), 1, "{plan:#?}");
    (plan.unplaced[0].kind, plan.unplaced[0].reason.as_str())
}

// ---- empty inputs -------------------------------------------------------------------------

#[test]
fn nothing_to_do() {
    let plan = schedule::<u64>(&[], &[]);
    assert!(plan.placements.is_empty() && plan.unplaced.is_empty());
    let plan = schedule::<u64>(&[node("a", "cpu", 4, 8)], &[]);
    assert!(plan.placements.is_empty() && plan.unplaced.is_empty());
}

#[test]
fn no_nodes_at_all() {
    let plan = schedule(&[], &[req(1, None, 1000, 0)]);
    assert_eq!(
        only_unplaced(&plan),
        (UnplacedKind::NoNodes, "never fits: there are no nodes")
    );
    let plan = schedule(&[], &[req(1, Some("gpu"), 1000, 0)]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::NoNodes,
            "never fits: pool \"gpu\" has no nodes (there are no nodes at all)"
        )
    );
}

#[test]
fn unknown_pool_names_the_pools_that_exist() {
    let nodes = [node("a", "cpu", 4, 8), node("b", "big", 4, 8)];
    let plan = schedule(&nodes, &[req(1, Some("gpu"), 1000, 0)]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::NoNodes,
            "never fits: pool \"gpu\" has no nodes (pools with nodes: \"big\", \"cpu\")"
        )
    );
}

#[test]
fn unknown_pool_lists_at_most_ten_pools() {
    let nodes: Vec<NodeView> = (0..12)
        .map(|i| node(&format!("n{i}"), &format!("p{i:02}"), 1, 1))
        .collect();
    let plan = schedule(&nodes, &[req(1, Some("x"), 0, 0)]);
    let (_, reason) = only_unplaced(&plan);
    assert!(reason.contains("\"p09\", and 2 more)"), "{reason}");
    assert!(!reason.contains("p10"), "{reason}");
}

// ---- capacity edges -----------------------------------------------------------------------

#[test]
fn exact_fit_is_placed_and_one_more_is_not() {
    let nodes = [node("a", "cpu", 4, 8)];
    let plan = schedule(&nodes, &[req(1, None, 4000, 8)]);
    assert_eq!(placed(&plan), [(1, "a")]);

    let plan = schedule(&nodes, &[req(1, None, 4001, 0)]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: needs more than any node has: 4.001 cores (most: 4)"
        )
    );

    let mut r = req(1, None, 0, 8);
    r.need.memory_bytes += 1;
    let plan = schedule(&nodes, &[r]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: needs more than any node has: 8.01 GiB memory (most: 8 GiB)"
        )
    );
}

#[test]
fn used_capacity_is_not_free() {
    let nodes = [busy(node("a", "cpu", 4, 8), 3000, 6, 2)];
    let plan = schedule(&nodes, &[req(1, None, 1000, 2), req(2, None, 1, 0)]);
    assert_eq!(placed(&plan), [(1, "a")]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "no node fits now: of 1 node, 1 has too few free cores (need 0.001, most free 0)"
        )
    );
}

#[test]
fn more_used_than_total_reads_as_full() {
    let nodes = [busy(node("a", "cpu", 4, 8), 9000, 20, 3)];
    let plan = schedule(&nodes, &[req(1, None, 1000, 0), req(2, None, 0, 0)]);
    // A request for nothing still fits a full node: it takes nothing from it.
    assert_eq!(placed(&plan), [(2, "a")]);
    assert_eq!(only_unplaced(&plan).0, UnplacedKind::Wait);
}

#[test]
fn placements_use_up_capacity_within_one_call() {
    let nodes = [node("a", "cpu", 4, 8)];
    let reqs: Vec<_> = (1..=5).map(|k| req(k, None, 1000, 1)).collect();
    let plan = schedule(&nodes, &reqs);
    assert_eq!(placed(&plan), [(1, "a"), (2, "a"), (3, "a"), (4, "a")]);
    assert_eq!(plan.unplaced[0].key, 5);
    assert_eq!(
        plan.unplaced[0].reason,
        "no node fits now: of 1 node, 1 has too few free cores (need 1, most free 0)"
    );
}

#[test]
fn memory_is_checked_as_well_as_cores() {
    let nodes = [node("a", "cpu", 16, 4)];
    let reqs = [
        req(1, None, 1000, 3),
        req(2, None, 1000, 2),
        req(3, None, 1000, 1),
    ];
    let plan = schedule(&nodes, &reqs);
    assert_eq!(placed(&plan), [(1, "a"), (3, "a")]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "no node fits now: of 1 node, 1 has too little free memory (need 2 GiB, most free 0 B)"
        )
    );
}

// ---- rank ---------------------------------------------------------------------------------

#[test]
fn bin_packing_prefers_the_fullest_node_that_fits() {
    let nodes = [
        node("roomy", "cpu", 8, 32),
        busy(node("tight", "cpu", 8, 32), 6000, 0, 1),
        busy(node("middle", "cpu", 8, 32), 4000, 0, 1),
    ];
    let plan = schedule(
        &nodes,
        &[
            req(1, None, 2000, 0), // tight has exactly 2 left
            req(2, None, 3000, 0), // tight is full now; middle has 4
            req(3, None, 2000, 0), // middle has 1 left: roomy
            req(4, None, 1000, 0), // middle's last core
        ],
    );
    assert_eq!(
        placed(&plan),
        [(1, "tight"), (2, "middle"), (3, "roomy"), (4, "middle")]
    );
}

#[test]
fn bin_packing_fills_one_node_before_starting_the_next() {
    let nodes = [
        node("a", "cpu", 2, 8),
        node("b", "cpu", 2, 8),
        node("c", "cpu", 2, 8),
    ];
    let reqs: Vec<_> = (1..=5).map(|k| req(k, None, 1000, 1)).collect();
    let plan = schedule(&nodes, &reqs);
    assert_eq!(
        placed(&plan),
        [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c")]
    );
}

#[test]
fn equal_cores_rank_by_least_free_memory() {
    let nodes = [
        node("a", "cpu", 4, 64),
        node("b", "cpu", 4, 8),
        node("c", "cpu", 4, 16),
    ];
    let plan = schedule(&nodes, &[req(1, None, 1000, 12), req(2, None, 1000, 2)]);
    // 1 needs 12 GiB: c is the smallest that fits. 2: c has 3 cores left, fewest free.
    assert_eq!(placed(&plan), [(1, "c"), (2, "c")]);
}

#[test]
fn ties_go_to_the_first_name_whatever_the_input_order() {
    let mut nodes = vec![
        node("c", "cpu", 4, 8),
        node("a", "cpu", 4, 8),
        node("b", "cpu", 4, 8),
    ];
    let reqs = [req(1, None, 4000, 0), req(2, None, 4000, 0)];
    let plan = schedule(&nodes, &reqs);
    assert_eq!(placed(&plan), [(1, "a"), (2, "b")]);
    nodes.reverse();
    assert_eq!(schedule(&nodes, &reqs), plan);
}

#[test]
fn same_input_same_plan() {
    let nodes: Vec<NodeView> = (0..50)
        .map(|i| {
            busy(
                node(&format!("n{i:02}"), "cpu", 8, 32),
                (i % 7) * 1000,
                i % 5,
                1,
            )
        })
        .collect();
    let reqs: Vec<_> = (0..200)
        .map(|k| req(k, None, 500 + (k % 4) * 500, k % 3))
        .collect();
    let a = schedule(&nodes, &reqs);
    let b = schedule(&nodes, &reqs);
    assert_eq!(a, b);
    let mut shuffled = nodes.clone();
    shuffled.rotate_left(17);
    shuffled.swap(3, 40);
    assert_eq!(schedule(&shuffled, &reqs), a);
}

#[test]
fn a_request_for_nothing_goes_to_the_fullest_node() {
    let nodes = [
        node("a", "cpu", 4, 8),
        busy(node("b", "cpu", 4, 8), 4000, 8, 2),
    ];
    let plan = schedule(&nodes, &[req(1, None, 0, 0)]);
    assert_eq!(placed(&plan), [(1, "b")]);
}

// ---- order --------------------------------------------------------------------------------

#[test]
fn earlier_requests_are_served_first() {
    let nodes = [node("a", "cpu", 4, 8)];
    let plan = schedule(&nodes, &[req(1, None, 3000, 0), req(2, None, 2000, 0)]);
    assert_eq!(placed(&plan), [(1, "a")]);
    assert_eq!(plan.unplaced[0].key, 2);
    let plan = schedule(&nodes, &[req(2, None, 2000, 0), req(1, None, 3000, 0)]);
    assert_eq!(placed(&plan), [(2, "a")]);
    assert_eq!(plan.unplaced[0].key, 1);
}

#[test]
fn a_request_that_does_not_fit_does_not_block_later_ones() {
    let nodes = [node("a", "cpu", 4, 8)];
    let reqs = [
        req(1, None, 1000, 0),
        req(2, None, 8000, 0),
        req(3, None, 4000, 0),
        req(4, None, 1000, 0),
    ];
    let plan = schedule(&nodes, &reqs);
    assert_eq!(placed(&plan), [(1, "a"), (4, "a")]);
    let left: Vec<_> = plan.unplaced.iter().map(|u| (u.key, u.kind)).collect();
    assert_eq!(left, [(2, UnplacedKind::TooLarge), (3, UnplacedKind::Wait)]);
}

#[test]
fn plan_keeps_request_order_and_caller_keys() {
    let nodes = [node("a", "cpu", 2, 8)];
    let reqs: Vec<TaskRequest<&str>> = ["x", "y", "z"]
        .into_iter()
        .map(|k| TaskRequest::new(k, None, Res::new(1000, 0)))
        .collect();
    let plan = schedule(&nodes, &reqs);
    let keys: Vec<_> = plan.placements.iter().map(|p| p.key).collect();
    assert_eq!(keys, ["x", "y"]);
    assert_eq!(plan.unplaced[0].key, "z");
}

// ---- pools --------------------------------------------------------------------------------

#[test]
fn a_pool_request_only_uses_that_pool() {
    let nodes = [
        busy(node("a", "cpu", 4, 8), 3000, 0, 1),
        node("b", "big", 64, 256),
    ];
    let plan = schedule(
        &nodes,
        &[
            req(1, Some("big"), 1000, 0),
            req(2, Some("cpu"), 1000, 0),
            req(3, Some("cpu"), 1000, 0),
        ],
    );
    assert_eq!(placed(&plan), [(1, "b"), (2, "a")]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "no node fits now: of 1 node in pool \"cpu\", 1 has too few free cores (need 1, most free 0)"
        )
    );
}

#[test]
fn any_pool_picks_the_best_node_across_pools() {
    let nodes = [
        node("a", "cpu", 16, 64),
        busy(node("b", "big", 16, 64), 14000, 0, 1),
    ];
    let plan = schedule(&nodes, &[req(1, None, 2000, 0), req(2, None, 2000, 0)]);
    assert_eq!(placed(&plan), [(1, "b"), (2, "a")]);
}

#[test]
fn too_large_is_judged_within_the_pool() {
    let nodes = [node("a", "cpu", 4, 8), node("b", "big", 64, 256)];
    let plan = schedule(&nodes, &[req(1, Some("cpu"), 32000, 0)]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: needs more than any node in pool \"cpu\" has: 32 cores (most: 4)"
        )
    );
    let plan = schedule(&nodes, &[req(1, None, 32000, 0)]);
    assert_eq!(placed(&plan), [(1, "b")]);
}

// ---- held and down nodes --------------------------------------------------------------------

#[test]
fn held_and_down_nodes_get_nothing() {
    let nodes = [
        held(node("a", "cpu", 64, 256), Some(DISKFULL)),
        held(
            node("b", "cpu", 64, 256),
            Some("down: no heartbeat for 90s"),
        ),
        node("c", "cpu", 2, 8),
    ];
    let plan = schedule(&nodes, &[req(1, None, 1000, 0), req(2, None, 2000, 0)]);
    assert_eq!(placed(&plan), [(1, "c")]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "no node fits now: of 3 nodes, 2 unavailable (1 cordoned: hold by monitoring \
             (DiskFull); 1 down: no heartbeat for 90s), 1 has too few free cores (need 2, most \
             free 1)"
        )
    );
}

#[test]
fn kubernetes_style_reason() {
    let nodes = [
        busy(node("a", "cpu", 8, 32), 6000, 0, 3),
        busy(node("b", "cpu", 8, 32), 7000, 0, 3),
        busy(node("c", "cpu", 8, 32), 8000, 0, 4),
        held(node("d", "cpu", 8, 32), Some(DISKFULL)),
        held(node("e", "cpu", 8, 32), Some(DISKFULL)),
    ];
    let plan = schedule(&nodes, &[req(1, Some("cpu"), 4000, 0)]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "no node fits now: of 5 nodes in pool \"cpu\", 2 unavailable (cordoned: hold by \
             monitoring (DiskFull)), 3 have too few free cores (need 4, most free 2)"
        )
    );
}

#[test]
fn a_held_node_large_enough_means_wait_not_never() {
    let nodes = [
        held(node("big", "cpu", 64, 256), None),
        node("small", "cpu", 4, 8),
    ];
    let plan = schedule(&nodes, &[req(1, None, 32000, 0)]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "no node fits now: of 2 nodes, 1 unavailable (unschedulable), 1 has too few free \
             cores (need 32, most free 4)"
        )
    );
}

#[test]
fn unavailable_reasons_are_grouped_most_common_first_and_capped() {
    let mut nodes = vec![node("ok", "cpu", 1, 1)];
    let reasons = [
        ("a", "evicting: hold by admin (bad DIMM)"),
        ("b", DISKFULL),
        ("c", DISKFULL),
        ("d", DISKFULL),
        ("e", "down"),
        ("f", "down"),
        ("g", "cordoned: hold by monitoring (HighTemp)"),
        ("h", "cordoned: hold by monitoring (Xid)"),
    ];
    for (id, why) in reasons {
        nodes.push(held(node(id, "cpu", 1, 1), Some(why)));
    }
    let plan = schedule(&nodes, &[req(1, None, 1000, 0), req(2, None, 1000, 0)]);
    assert_eq!(placed(&plan), [(1, "ok")]);
    assert_eq!(
        only_unplaced(&plan).1,
        "no node fits now: of 9 nodes, 8 unavailable (3 cordoned: hold by monitoring (DiskFull); \
         2 down; 1 cordoned: hold by monitoring (HighTemp); 2 more for other reasons), 1 has too \
         few free cores (need 1, most free 0)"
    );
}

// ---- exclusive ------------------------------------------------------------------------------

#[test]
fn exclusive_needs_a_node_with_nothing_running() {
    let nodes = [
        busy(node("a", "cpu", 64, 256), 1000, 0, 1),
        node("b", "cpu", 8, 32),
    ];
    let plan = schedule(&nodes, &[exclusive(req(1, None, 4000, 0))]);
    assert_eq!(placed(&plan), [(1, "b")]);
}

#[test]
fn exclusive_takes_the_whole_node() {
    let nodes = [node("a", "cpu", 64, 256)];
    let plan = schedule(
        &nodes,
        &[exclusive(req(1, None, 1000, 0)), req(2, None, 1000, 0)],
    );
    assert_eq!(placed(&plan), [(1, "a")]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "no node fits now: of 1 node, 1 runs an exclusive job"
        )
    );
}

#[test]
fn exclusive_after_ordinary_work_waits() {
    let nodes = [node("a", "cpu", 64, 256)];
    let plan = schedule(
        &nodes,
        &[req(1, None, 1000, 0), exclusive(req(2, None, 1000, 0))],
    );
    assert_eq!(placed(&plan), [(1, "a")]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "no node fits now: of 1 node, 1 is busy (an exclusive request needs an idle node)"
        )
    );
}

#[test]
fn nodes_already_running_an_exclusive_job_get_nothing() {
    let mut taken = busy(node("a", "cpu", 64, 256), 1000, 0, 1);
    taken.exclusive_taken = true;
    let plan = schedule(
        &[taken, node("b", "cpu", 2, 8)],
        &[req(1, None, 1000, 0), req(2, None, 4000, 0)],
    );
    assert_eq!(placed(&plan), [(1, "b")]);
    assert_eq!(
        only_unplaced(&plan).1,
        "no node fits now: of 2 nodes, 1 runs an exclusive job, 1 has too few free cores \
         (need 4, most free 1)"
    );
}

#[test]
fn exclusive_requests_get_a_node_each_smallest_first() {
    let nodes = [
        node("huge", "cpu", 128, 1024),
        node("small", "cpu", 8, 32),
        node("medium", "cpu", 32, 128),
    ];
    let reqs = [
        exclusive(req(1, None, 4000, 0)),
        exclusive(req(2, None, 4000, 0)),
        exclusive(req(3, None, 16000, 0)),
    ];
    let plan = schedule(&nodes, &reqs);
    assert_eq!(placed(&plan), [(1, "small"), (2, "medium"), (3, "huge")]);
}

#[test]
fn exclusive_reason_counts_busy_and_short_idle_nodes() {
    let nodes = [
        busy(node("a", "cpu", 64, 256), 1000, 0, 1),
        busy(node("b", "cpu", 64, 256), 1000, 0, 1),
        node("c", "cpu", 8, 32),
    ];
    let plan = schedule(&nodes, &[exclusive(req(1, None, 16000, 0))]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "no node fits now: of 3 nodes, 2 are busy (an exclusive request needs an idle \
             node), 1 has too few free cores (need 16, most free 8)"
        )
    );
}

#[test]
fn exclusive_prefers_nodes_without_devices() {
    let nodes = [gpus(node("g", "cpu", 8, 32), 4), node("p", "cpu", 64, 256)];
    let plan = schedule(&nodes, &[exclusive(req(1, None, 1000, 0))]);
    assert_eq!(placed(&plan), [(1, "p")]);
}

#[test]
fn exclusive_with_devices() {
    let nodes = [
        gpus(node("g8", "gpu", 64, 256), 8),
        gpus(busy(node("g4busy", "gpu", 64, 256), 1000, 0, 1), 4),
        gpus(node("g4", "gpu", 64, 256), 4),
    ];
    let plan = schedule(
        &nodes,
        &[
            exclusive(gpu_req(1, None, 1000, 2)),
            exclusive(gpu_req(2, None, 1000, 2)),
            exclusive(gpu_req(3, None, 1000, 2)),
        ],
    );
    assert_eq!(placed(&plan), [(1, "g4"), (2, "g8")]);
    assert_eq!(
        only_unplaced(&plan).1,
        "no node fits now: of 3 nodes, 2 run an exclusive job, 1 is busy (an exclusive request \
         needs an idle node)"
    );
}

// ---- devices --------------------------------------------------------------------------------

#[test]
fn device_requests_need_enough_free_devices() {
    let mut two_used = gpus(node("b", "gpu", 32, 128), 4);
    two_used.used.devices.insert(GPU.into(), 3);
    two_used.running = 1;
    let nodes = [
        node("a", "gpu", 32, 128),
        two_used,
        gpus(node("c", "gpu", 32, 128), 2),
    ];
    let plan = schedule(
        &nodes,
        &[
            gpu_req(1, None, 1000, 2), // b has 1 free: c, which has exactly 2
            gpu_req(2, None, 1000, 1), // b, with 1 free
            gpu_req(3, None, 1000, 1), // none left
        ],
    );
    assert_eq!(placed(&plan), [(1, "c"), (2, "b")]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "no node fits now: of 3 nodes, 3 have too few free nvidia.com/gpu (need 1, most \
             free 0)"
        )
    );
}

#[test]
fn device_requests_pack_devices_first() {
    // b has more free cores but fewer free GPUs: the GPU count decides.
    let nodes = [
        busy(gpus(node("a", "gpu", 32, 128), 8), 30000, 0, 1),
        gpus(node("b", "gpu", 32, 128), 2),
    ];
    let plan = schedule(&nodes, &[gpu_req(1, None, 1000, 1)]);
    assert_eq!(placed(&plan), [(1, "b")]);
}

#[test]
fn cpu_requests_stay_off_device_nodes_while_a_plain_node_fits() {
    let nodes = [
        busy(gpus(node("g", "mixed", 32, 128), 8), 31000, 0, 1),
        node("p", "mixed", 2, 128),
    ];
    let reqs: Vec<_> = (1..=4).map(|k| req(k, None, 1000, 0)).collect();
    let plan = schedule(&nodes, &reqs);
    // Bin-packing alone would pick g (1 core free); the plain node goes first, then g.
    assert_eq!(placed(&plan), [(1, "p"), (2, "p"), (3, "g")]);
    assert_eq!(plan.unplaced[0].key, 4);
}

#[test]
fn several_device_kinds_must_all_fit() {
    let fpga = "xilinx.com/fpga";
    let mut both = gpus(node("both", "acc", 32, 128), 2);
    both.total.devices.insert(fpga.into(), 1);
    let nodes = [gpus(node("gpu-only", "acc", 32, 128), 1), both];
    let mut r = gpu_req(1, None, 1000, 1);
    r.need.devices.insert(fpga.into(), 1);
    let plan = schedule(&nodes, &[r.clone(), r]);
    assert_eq!(placed(&plan), [(1, "both")]);
    assert_eq!(
        only_unplaced(&plan).1,
        // Both still have a free GPU: the FPGA is what is missing.
        "no node fits now: of 2 nodes, 2 have too few free xilinx.com/fpga (need 1, most free 0)"
    );
}

#[test]
fn zero_counts_are_the_same_as_absent() {
    let mut n = node("a", "cpu", 4, 8);
    n.total.devices.insert(GPU.into(), 0);
    let plan = schedule(
        &[n],
        &[gpu_req(1, None, 1000, 0), gpu_req(2, None, 1000, 0)],
    );
    assert_eq!(placed(&plan), [(1, "a"), (2, "a")]);
}

#[test]
fn a_device_no_node_has_never_fits() {
    let nodes = [gpus(node("a", "gpu", 4, 8), 4)];
    let mut r = req(1, Some("gpu"), 1000, 0);
    r.need.devices.insert("amd.com/gpu".into(), 1);
    let plan = schedule(&nodes, &[r]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: needs more than any node in pool \"gpu\" has: 1 amd.com/gpu (most: 0)"
        )
    );
}

#[test]
fn too_many_devices_never_fit() {
    let nodes = [gpus(node("a", "gpu", 4, 8), 4), node("b", "gpu", 4, 8)];
    let plan = schedule(&nodes, &[gpu_req(1, None, 8000, 8)]);
    assert_eq!(
        only_unplaced(&plan).1,
        "never fits: needs more than any node has: 8 cores (most: 4), 8 nvidia.com/gpu (most: 4)"
    );
}

#[test]
fn too_large_when_no_single_node_has_everything() {
    // One node has the cores, another the memory, a third the GPUs; none has all three.
    let nodes = [
        node("cores", "x", 64, 8),
        node("mem", "x", 4, 1024),
        gpus(node("gpu", "x", 4, 8), 8),
    ];
    let mut r = gpu_req(1, None, 32000, 2);
    r.need.memory_bytes = 512 * GIB;
    let plan = schedule(&nodes, &[r]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: no node has 32 cores, 512 GiB memory and 2 nvidia.com/gpu at once"
        )
    );
    // Without devices the two-dimensional check decides it.
    let plan = schedule(&nodes, &[req(2, Some("x"), 32000, 512)]);
    assert_eq!(
        only_unplaced(&plan).1,
        "never fits: no node in pool \"x\" has 32 cores and 512 GiB memory at once"
    );
}

// ---- reasons are shared and still exact -----------------------------------------------------

#[test]
fn many_unplaced_requests_of_one_shape() {
    let nodes: Vec<NodeView> = (0..3)
        .map(|i| node(&format!("n{i}"), "cpu", 1, 4))
        .collect();
    let reqs: Vec<_> = (0..10).map(|k| req(k, None, 1000, 1)).collect();
    let plan = schedule(&nodes, &reqs);
    assert_eq!(plan.placements.len(), 3);
    assert_eq!(plan.unplaced.len(), 7);
    for u in &plan.unplaced {
        assert_eq!(u.kind, UnplacedKind::Wait);
        assert_eq!(
            u.reason,
            "no node fits now: of 3 nodes, 3 have too few free cores (need 1, most free 0)"
        );
    }
}

#[test]
fn capacity_converts_from_the_agent_protocol() {
    let c = Capacity {
        cpus: 8,
        memory_bytes: 16 * GIB,
        devices: [(GPU.to_owned(), 2)].into_iter().collect(),
    };
    assert_eq!(Res::from(&c), Res::new(8000, 16 * GIB).with_device(GPU, 2));
}

#[test]
fn indexes_hold_exactly_the_nodes_that_can_take_work() {
    let mut taken = node("x", "cpu", 8, 8);
    taken.exclusive_taken = true;
    let nodes = [
        node("a", "cpu", 8, 8),
        gpus(node("b", "cpu", 8, 8), 2),
        busy(node("c", "cpu", 8, 8), 1000, 0, 1),
        held(node("d", "cpu", 8, 8), None),
        taken,
    ];
    let reqs = [req(1, None, 1000, 0), exclusive(req(2, None, 1000, 0))];
    let mut state = State::new(&nodes, &reqs);
    // open: a, c (1 entry each), b (with_devices + one device level); idle: a and b.
    assert_eq!(state.pools[0].open.entries(), 4);
    assert_eq!(state.pools[0].idle.entries(), 3);
    let (placements, left) = state.serve(&reqs);
    assert_eq!(placements.len(), 2);
    assert!(left.is_empty());
    // 1 went to c (fewest free cores), 2 took a whole: open is c and b, idle only b.
    assert_eq!(state.pools[0].open.entries(), 3);
    assert_eq!(state.pools[0].idle.entries(), 2);
}

// ---- gangs ----------------------------------------------------------------------------------

const MODEL: &str = "nvidia.com/gpu.model";

fn gang(mut r: TaskRequest<u64>, members: u32) -> TaskRequest<u64> {
    r.members = members;
    r
}

fn with_label(mut n: NodeView, k: &str, v: &str) -> NodeView {
    n.labels.insert(k.into(), v.into());
    n
}

fn wants_label(mut r: TaskRequest<u64>, k: &str, v: &str) -> TaskRequest<u64> {
    r.labels.insert(k.into(), v.into());
    r
}

/// A host-network request binding `ports`.
fn host_net(mut r: TaskRequest<u64>, ports: &[u16]) -> TaskRequest<u64> {
    r.host_network = true;
    r.host_ports = ports.to_vec();
    r
}

fn ports_taken(mut n: NodeView, ports: &[u16]) -> NodeView {
    n.host_ports.extend(ports);
    n
}

fn no_host_net(mut n: NodeView) -> NodeView {
    n.host_network = false;
    n
}

/// (key, node names) of each placement.
fn placed_all(plan: &Plan<u64>) -> Vec<(u64, Vec<&str>)> {
    plan.placements
        .iter()
        .map(|p| (p.key, p.nodes().map(NodeId::as_str).collect()))
        .collect()
}

#[test]
fn a_gang_goes_on_distinct_nodes_fullest_first() {
    let nodes = [
        node("a", "cpu", 8, 32),
        busy(node("b", "cpu", 8, 32), 4000, 0, 1),
        busy(node("c", "cpu", 8, 32), 6000, 0, 1),
        busy(node("d", "cpu", 8, 32), 7000, 0, 1),
    ];
    // d has 1 core free: too few. c, b, a in bin-packing order, each once although c and b
    // would have room for two members.
    let plan = schedule(&nodes, &[gang(req(1, None, 2000, 0), 3)]);
    assert_eq!(placed_all(&plan), [(1, vec!["c", "b", "a"])]);
    assert!(plan.unplaced.is_empty());
}

#[test]
fn members_zero_is_one() {
    let nodes = [node("a", "cpu", 4, 8)];
    let plan = schedule(&nodes, &[gang(req(1, None, 1000, 0), 0)]);
    assert_eq!(placed(&plan), [(1, "a")]);
}

#[test]
fn a_gang_is_placed_whole_or_not_at_all_and_later_requests_backfill() {
    let nodes = [node("a", "cpu", 4, 8), node("b", "cpu", 4, 8)];
    let plan = schedule(
        &nodes,
        &[gang(req(1, None, 1000, 0), 3), req(2, None, 4000, 0)],
    );
    // Two nodes could take a member each, but a partial gang is never placed: both stay
    // free for request 2.
    assert_eq!(placed(&plan), [(2, "a")]);
    assert_eq!(plan.unplaced.len(), 1);
    assert_eq!(plan.unplaced[0].key, 1);
}

#[test]
fn two_gangs_that_fit_alone_but_not_together() {
    let nodes: Vec<NodeView> = ["a", "b", "c", "d"]
        .iter()
        .map(|id| node(id, "cpu", 4, 8))
        .collect();
    let reqs = [
        gang(req(1, None, 4000, 0), 3),
        gang(req(2, None, 4000, 0), 3),
        req(3, None, 4000, 0),
    ];
    let plan = schedule(&nodes, &reqs);
    assert_eq!(
        placed_all(&plan),
        [(1, vec!["a", "b", "c"]), (3, vec!["d"])]
    );
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "not all members fit now: needs 3 nodes with 4 cores each of one pool, and 0 have \
             room (at most, in pool \"cpu\"); of 4 nodes in pool \"cpu\", 4 have too few free \
             cores (need 4, most free 0)"
        )
    );
}

#[test]
fn a_gang_with_any_pool_stays_in_one_pool() {
    let nodes = [
        node("a1", "a", 4, 8),
        node("a2", "a", 4, 8),
        node("b1", "b", 4, 8),
        node("b2", "b", 4, 8),
        node("b3", "b", 4, 8),
    ];
    let plan = schedule(&nodes, &[gang(req(1, None, 1000, 0), 3)]);
    assert_eq!(placed_all(&plan), [(1, vec!["b1", "b2", "b3"])]);
}

#[test]
fn of_pools_that_can_take_a_gang_the_one_whose_last_pick_is_fullest_wins() {
    let nodes = [
        // Pool "a": its second-best node has 8 cores free.
        busy(node("a1", "a", 8, 8), 7000, 0, 1),
        node("a2", "a", 8, 8),
        // Pool "b": its second-best node has 4 free, fewer than a2: b packs tighter.
        busy(node("b1", "b", 8, 8), 6000, 0, 1),
        busy(node("b2", "b", 8, 8), 4000, 0, 1),
    ];
    let plan = schedule(&nodes, &[gang(req(1, None, 1000, 0), 2)]);
    assert_eq!(placed_all(&plan), [(1, vec!["b1", "b2"])]);
}

#[test]
fn exclusive_gang_members_take_whole_idle_nodes() {
    let nodes = [
        busy(node("a", "cpu", 8, 8), 1000, 0, 1),
        node("b", "cpu", 8, 8),
        node("c", "cpu", 8, 8),
    ];
    let plan = schedule(
        &nodes,
        &[
            exclusive(gang(req(1, None, 1000, 0), 2)),
            exclusive(gang(req(2, None, 1000, 0), 2)),
        ],
    );
    assert_eq!(placed_all(&plan), [(1, vec!["b", "c"])]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "not all members fit now: needs 2 whole nodes with 1 core each of one pool, and 0 \
             have room (at most, in pool \"cpu\"); of 3 nodes in pool \"cpu\", 2 run an \
             exclusive job, 1 is busy (an exclusive request needs an idle node)"
        )
    );
}

#[test]
fn a_gang_larger_than_its_pool_never_fits() {
    let nodes = [
        node("a", "cpu", 4, 8),
        node("b", "cpu", 4, 8),
        node("c", "cpu", 1, 8),
        held(node("d", "cpu", 1, 8), Some(DISKFULL)),
        node("e", "cpu", 1, 8),
    ];
    let plan = schedule(&nodes, &[gang(req(1, Some("cpu"), 2000, 1), 3)]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: needs 3 nodes with 2 cores and 1 GiB memory each, and only 2 of the 5 \
             nodes in pool \"cpu\" could ever take one"
        )
    );
}

#[test]
fn a_gang_of_absurd_size_is_refused_not_allocated() {
    let nodes = [node("a", "cpu", 4, 8), node("b", "cpu", 4, 8)];
    let plan = schedule(&nodes, &[gang(req(1, Some("cpu"), 1000, 0), u32::MAX)]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: needs 4294967295 nodes with 1 core each, and only 2 of the 2 nodes in \
             pool \"cpu\" could ever take one"
        )
    );
}

#[test]
fn a_gang_larger_than_every_pool_names_the_largest() {
    let nodes = [
        node("a1", "a", 4, 8),
        node("b1", "b", 4, 8),
        node("b2", "b", 4, 8),
        node("b3", "b", 1, 8),
    ];
    let plan = schedule(&nodes, &[gang(req(1, None, 2000, 0), 3)]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: needs 3 nodes with 2 cores each of one pool, and no pool has more than \
             2 that could ever take one (pool \"b\": 2 of its 3 nodes)"
        )
    );
}

#[test]
fn a_gang_whose_members_fit_no_node_says_what_is_too_large() {
    let nodes = [node("a", "cpu", 4, 8), node("b", "cpu", 4, 8)];
    let plan = schedule(&nodes, &[gang(req(1, None, 8000, 0), 2)]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: needs more than any node has: 8 cores (most: 4)"
        )
    );
}

#[test]
fn a_gang_waiting_for_room_counts_nodes_with_room() {
    let nodes = [
        node("a", "cpu", 8, 32),
        busy(node("b", "cpu", 8, 32), 3000, 0, 1),
        busy(node("c", "cpu", 8, 32), 6000, 0, 1),
        busy(node("d", "cpu", 8, 32), 7000, 0, 1),
        held(node("e", "cpu", 8, 32), Some(DISKFULL)),
    ];
    let plan = schedule(&nodes, &[gang(req(1, Some("cpu"), 4000, 0), 3)]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "not all members fit now: needs 3 nodes with 4 cores each, and 2 have room; of 5 \
             nodes in pool \"cpu\", 1 unavailable (cordoned: hold by monitoring (DiskFull)), 2 \
             have too few free cores (need 4, most free 2)"
        )
    );
}

#[test]
fn a_gang_waiting_in_any_pool_names_the_pool_with_most_room() {
    let nodes = [
        node("a1", "a", 4, 8),
        busy(node("a2", "a", 4, 8), 4000, 0, 1),
        node("b1", "b", 4, 8),
        node("b2", "b", 4, 8),
        busy(node("b3", "b", 4, 8), 4000, 0, 1),
    ];
    let plan = schedule(&nodes, &[gang(req(1, None, 2000, 0), 3)]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "not all members fit now: needs 3 nodes with 2 cores each of one pool, and 2 have \
             room (at most, in pool \"b\"); of 3 nodes in pool \"b\", 1 has too few free cores \
             (need 2, most free 0)"
        )
    );
}

// ---- labels ---------------------------------------------------------------------------------

#[test]
fn labels_must_all_match_exactly() {
    let nodes = [
        with_label(node("a", "gpu", 8, 8), MODEL, "H100"),
        with_label(node("b", "gpu", 8, 8), MODEL, "T4"),
        with_label(with_label(node("c", "gpu", 8, 8), MODEL, "T4"), "zone", "x"),
    ];
    let plan = schedule(
        &nodes,
        &[
            wants_label(req(1, None, 1000, 0), MODEL, "T4"),
            wants_label(wants_label(req(2, None, 1000, 0), MODEL, "T4"), "zone", "x"),
            wants_label(req(3, None, 1000, 0), MODEL, "t4"),
        ],
    );
    // 1 goes to b, the first of the two T4 nodes by name; 2 needs c's zone too.
    assert_eq!(placed(&plan), [(1, "b"), (2, "c")]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: no node has label nvidia.com/gpu.model=t4"
        )
    );
}

#[test]
fn a_label_no_node_in_the_pool_has() {
    let nodes = [
        with_label(node("a", "cpu", 8, 8), MODEL, "T4"),
        node("b", "gpu", 8, 8),
    ];
    let plan = schedule(
        &nodes,
        &[wants_label(req(1, Some("gpu"), 1000, 0), MODEL, "T4")],
    );
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: no node in pool \"gpu\" has label nvidia.com/gpu.model=T4"
        )
    );
}

#[test]
fn labels_each_present_but_never_together() {
    let nodes = [
        with_label(node("a", "gpu", 8, 8), MODEL, "T4"),
        with_label(node("b", "gpu", 8, 8), "zone", "x"),
    ];
    let r = wants_label(wants_label(req(1, None, 1000, 0), MODEL, "T4"), "zone", "x");
    let plan = schedule(&nodes, &[r]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: no node has labels nvidia.com/gpu.model=T4 and zone=x at once"
        )
    );
}

#[test]
fn matching_nodes_too_small_never_fit() {
    let nodes = [
        with_label(node("a", "gpu", 4, 8), MODEL, "T4"),
        node("b", "gpu", 64, 8),
    ];
    let plan = schedule(&nodes, &[wants_label(req(1, None, 8000, 0), MODEL, "T4")]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: needs more than any node with nvidia.com/gpu.model=T4 has: 8 cores \
             (most: 4)"
        )
    );
}

#[test]
fn matching_nodes_that_are_full_are_counted_like_other_shortfalls() {
    let nodes = [
        busy(with_label(node("a", "gpu", 4, 8), MODEL, "T4"), 4000, 0, 1),
        node("b", "gpu", 4, 8),
        with_label(node("c", "gpu", 4, 8), MODEL, "H100"),
    ];
    let plan = schedule(&nodes, &[wants_label(req(1, None, 1000, 0), MODEL, "T4")]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "no node fits now: of 3 nodes, 2 lack nvidia.com/gpu.model=T4, 1 has too few free \
             cores (need 1, most free 0)"
        )
    );
}

#[test]
fn a_gang_with_labels_counts_only_matching_nodes() {
    let nodes = [
        with_label(node("a", "gpu", 4, 8), MODEL, "T4"),
        with_label(node("b", "gpu", 4, 8), MODEL, "T4"),
        node("c", "gpu", 4, 8),
    ];
    let r = gang(wants_label(req(1, Some("gpu"), 1000, 0), MODEL, "T4"), 3);
    let plan = schedule(&nodes, std::slice::from_ref(&r));
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: needs 3 nodes with nvidia.com/gpu.model=T4 and 1 core each, and only 2 \
             of the 3 nodes in pool \"gpu\" could ever take one"
        )
    );
    let plan = schedule(&nodes, &[gang(r, 2)]);
    assert_eq!(placed_all(&plan), [(1, vec!["a", "b"])]);
}

// ---- host ports and host networking --------------------------------------------------------

#[test]
fn two_services_on_one_host_port_never_share_a_node() {
    let nodes = [node("a", "cpu", 8, 8), node("b", "cpu", 8, 8)];
    let reqs = [
        host_net(req(1, None, 1000, 0), &[8080]),
        host_net(req(2, None, 1000, 0), &[8080, 9090]),
        host_net(req(3, None, 1000, 0), &[8080]),
        // Another port, or no host network at all: the first node is fine.
        host_net(req(4, None, 1000, 0), &[9091]),
        req(5, None, 1000, 0),
    ];
    let plan = schedule(&nodes, &reqs);
    assert_eq!(placed(&plan), [(1, "a"), (2, "b"), (4, "a"), (5, "a")]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "no node fits now: of 2 nodes, 2 have host port 8080 taken"
        )
    );
}

#[test]
fn a_port_taken_in_the_snapshot_is_taken() {
    let nodes = [
        ports_taken(node("a", "cpu", 8, 8), &[8080]),
        busy(node("b", "cpu", 8, 8), 8000, 0, 1),
    ];
    let plan = schedule(&nodes, &[host_net(req(1, None, 1000, 0), &[8080])]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "no node fits now: of 2 nodes, 1 has too few free cores (need 1, most free 0), 1 \
             has host port 8080 taken"
        )
    );
    // Without host networking the port is the container's own.
    let plan = schedule(&nodes, &[req(1, None, 1000, 0)]);
    assert_eq!(placed(&plan), [(1, "a")]);
}

#[test]
fn gang_members_take_their_host_ports_on_each_node() {
    let nodes = [node("a", "cpu", 8, 8), node("b", "cpu", 8, 8)];
    let reqs = [
        gang(host_net(req(1, None, 1000, 0), &[5000]), 2),
        host_net(req(2, None, 1000, 0), &[5000]),
    ];
    let plan = schedule(&nodes, &reqs);
    assert_eq!(placed_all(&plan), [(1, vec!["a", "b"])]);
    assert_eq!(only_unplaced(&plan).0, UnplacedKind::Wait);
}

#[test]
fn a_pool_that_forbids_host_networking() {
    let nodes = [
        no_host_net(node("s1", "secure", 8, 8)),
        no_host_net(node("s2", "secure", 8, 8)),
        busy(node("o", "open", 8, 8), 8000, 0, 1),
    ];
    let plan = schedule(&nodes, &[host_net(req(1, Some("secure"), 1000, 0), &[])]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: pool \"secure\" does not allow host networking"
        )
    );
    // Any pool: only "open" could, and it is full.
    let plan = schedule(&nodes, &[host_net(req(1, None, 1000, 0), &[])]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::Wait,
            "no node fits now: of 3 nodes, pool \"secure\" does not allow host networking (2 \
             nodes), 1 has too few free cores (need 1, most free 0)"
        )
    );
    // Without host networking "secure" is fine.
    let plan = schedule(&nodes, &[req(1, None, 1000, 0)]);
    assert_eq!(placed(&plan), [(1, "s1")]);
}

#[test]
fn no_pool_allows_host_networking() {
    let nodes = [
        no_host_net(node("a", "x", 8, 8)),
        no_host_net(node("b", "x", 8, 8)),
        no_host_net(node("c", "y", 8, 8)),
    ];
    let plan = schedule(&nodes, &[gang(req(1, None, 1000, 0), 2)]);
    assert_eq!(placed_all(&plan), [(1, vec!["a", "b"])]);
    let plan = schedule(&nodes, &[host_net(gang(req(1, None, 1000, 0), 2), &[])]);
    assert_eq!(
        only_unplaced(&plan),
        (
            UnplacedKind::TooLarge,
            "never fits: no pool allows host networking"
        )
    );
}

#[test]
fn constrained_reasons_are_shared_by_equal_asks_and_deterministic() {
    let nodes = [
        with_label(node("a", "gpu", 2, 8), MODEL, "T4"),
        node("b", "gpu", 2, 8),
    ];
    let reqs: Vec<_> = (0..5)
        .map(|k| wants_label(req(k, None, 1000, 0), MODEL, "T4"))
        .collect();
    let plan = schedule(&nodes, &reqs);
    assert_eq!(placed(&plan), [(0, "a"), (1, "a")]);
    let mut shuffled = nodes.to_vec();
    shuffled.reverse();
    assert_eq!(schedule(&shuffled, &reqs), plan);
    for u in &plan.unplaced {
        assert_eq!(
            u.reason,
            "no node fits now: of 2 nodes, 1 lacks nvidia.com/gpu.model=T4, 1 has too few free \
             cores (need 1, most free 0)"
        );
    }
}
