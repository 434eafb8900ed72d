use super::*;
use proptest::prelude::*;

#[test]
fn alternating_reproduces_the_authors_four_rank_partitions() {
    let plan = GroupPlan::new(Schedule::Alternating, 4, 2).unwrap();
    assert_eq!(plan.groups(0), vec![vec![0, 1], vec![2, 3]]);
    assert_eq!(plan.groups(1), vec![vec![1, 2], vec![0, 3]]);
    assert_eq!(plan.groups(2), plan.groups(0));
}

#[test]
fn hierarchical_groups_within_blocks_then_across() {
    let plan = GroupPlan::new(Schedule::Hierarchical, 6, 2).unwrap();
    assert_eq!(plan.groups(0), vec![vec![0, 1], vec![2, 3], vec![4, 5]]);
    assert_eq!(plan.groups(1), vec![vec![0, 2, 4], vec![1, 3, 5]]);
    assert_eq!(plan.groups(2), plan.groups(0));
    assert_eq!(plan.group_of(3, 1), vec![1, 3, 5]);
}

#[test]
fn hypercube_pairs_by_xor() {
    let plan = GroupPlan::new(Schedule::Hypercube, 8, 2).unwrap();
    for round in 0..6u64 {
        let bit = 1 << (round % 3);
        for j in 0..8 {
            assert_eq!(plan.group_of(j, round), {
                let mut g = vec![j, j ^ bit];
                g.sort();
                g
            });
        }
    }
}

#[test]
fn invalid_sizes_are_rejected_naming_the_key() {
    for (schedule, n, m) in [
        (Schedule::Fixed, 4, 3),
        (Schedule::Fixed, 4, 5),
        (Schedule::Random, 4, 0),
        (Schedule::Hypercube, 6, 2),
    ] {
        let e = GroupPlan::new(schedule, n, m).unwrap_err().to_string();
        assert!(e.contains("sync.group_size"), "{e}");
    }
    assert!(GroupPlan::new(Schedule::Global, 0, 1).is_err());
    assert_eq!(
        GroupPlan::new(Schedule::Global, 6, 2).unwrap().group_size(),
        6
    );
}

fn schedules() -> impl Strategy<Value = Schedule> {
    prop_oneof![
        Just(Schedule::Global),
        Just(Schedule::Fixed),
        Just(Schedule::Alternating),
        Just(Schedule::Random),
        Just(Schedule::Hypercube),
        Just(Schedule::Hierarchical),
    ]
}

#[test]
fn names_parse_to_built_in_or_registered_schedules_and_back() {
    for (name, _) in BUILT_IN {
        assert_eq!(name.parse::<Schedule>().unwrap().to_string(), name);
    }
    let ring: Schedule = "ring-3".parse().unwrap();
    assert_eq!(ring, Schedule::Registered("ring-3".into()));
    assert!("ring of 3".parse::<Schedule>().is_err());
    let e = Schedules::default().check(&ring).unwrap_err().to_string();
    assert!(
        e.contains("sync.schedule") && e.contains("\"ring-3\""),
        "{e}"
    );
    assert!(GroupPlan::new(ring, 4, 2).is_err());
}

/// `(n, m)` with m dividing n; powers for the hypercube.
fn sizes(schedule: Schedule) -> BoxedStrategy<(usize, usize)> {
    match schedule {
        Schedule::Hypercube => (1usize..=4, 1u32..=4)
            .prop_map(|(m, k)| (m.max(2).pow(k), m.max(2)))
            .boxed(),
        _ => (1usize..=8, 1usize..=8)
            .prop_map(|(m, q)| (m * q, m))
            .boxed(),
    }
}

proptest! {
    #[test]
    fn every_round_partitions_the_trainers_into_groups_of_m(
        (schedule, (n, m)) in schedules().prop_flat_map(|s| (Just(s.clone()), sizes(s))),
        round in 0u64..1000,
    ) {
        let plan = GroupPlan::new(schedule.clone(), n, m).unwrap();
        let groups = plan.groups(round);
        let size = match schedule {
            Schedule::Hierarchical if round % 2 == 1 => n / m,
            _ => plan.group_size(),
        };
        let mut seen = vec![false; n];
        for group in &groups {
            prop_assert_eq!(group.len(), size);
            for &t in group {
                prop_assert!(!seen[t], "trainer {} twice", t);
                seen[t] = true;
            }
        }
        prop_assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn random_is_reproducible_and_every_trainer_agrees(
        seed in any::<u64>(), round in 0u64..10_000, m in 1usize..5, q in 1usize..5,
    ) {
        let n = m * q;
        let plan = GroupPlan::new(Schedule::Random, n, m).unwrap().with_seed(seed);
        let again = GroupPlan::new(Schedule::Random, n, m).unwrap().with_seed(seed);
        let other = GroupPlan::new(Schedule::Random, n, m).unwrap().with_seed(seed ^ 1);
        if n >= 6 {
            // Another seed gives another sequence of partitions (over a few rounds).
            prop_assert!((round..round + 8).any(|r| plan.groups(r) != other.groups(r)));
        }
        prop_assert_eq!(plan.groups(round), again.groups(round));
        // Each trainer, deriving its own group, agrees with every member of it.
        for t in 0..n {
            let mine = plan.group_of(t, round);
            for &peer in &mine {
                prop_assert_eq!(&again.group_of(peer, round), &mine);
            }
        }
    }

    #[test]
    fn hypercube_reaches_the_exact_global_mean_in_log_m_n_rounds(
        (n, m) in sizes(Schedule::Hypercube),
        values in prop::collection::vec(-1000i32..1000, 256),
    ) {
        let plan = GroupPlan::new(Schedule::Hypercube, n, m).unwrap();
        prop_assert!(mixes_exactly(&plan, u64::from(plan.mixing_rounds()), &values[..n]));
    }

    #[test]
    fn hierarchical_reaches_the_exact_global_mean_in_two_rounds(
        (n, m) in sizes(Schedule::Hierarchical),
        values in prop::collection::vec(-1000i32..1000, 64),
    ) {
        let plan = GroupPlan::new(Schedule::Hierarchical, n, m).unwrap();
        prop_assert!(mixes_exactly(&plan, 2, &values[..n]));
    }
}

/// Whether averaging `values` within the groups of `rounds` rounds of
/// `plan` leaves every trainer with their global mean.
fn mixes_exactly(plan: &GroupPlan, rounds: u64, values: &[i32]) -> bool {
    let n = values.len();
    let mut x: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
    let mean = x.iter().sum::<f64>() / n as f64;
    for round in 0..rounds {
        let mut next = x.clone();
        for group in plan.groups(round) {
            let avg = group.iter().map(|&t| x[t]).sum::<f64>() / group.len() as f64;
            for &t in &group {
                next[t] = avg;
            }
        }
        x = next;
    }
    x.iter()
        .all(|v| (v - mean).abs() < 1e-9 * mean.abs().max(1.0))
}
