//! A short soak in the suite: 64 trainers in random groups of 4 for 10 s (the
//! long version is `./dev bench soak`): no deadlock, every sync accounted for,
//! memory flat after warm-up, a prompt stop.

use shadowsync_testkit::exclusive;
use shadowsync_testkit::runtime::soak;
use std::time::Duration;

#[test]
fn sixty_four_trainers_run_without_deadlock_leak_or_lost_sync() {
    let _serial = exclusive();
    let report = soak(64, "shadow-ma", Duration::from_secs(10));
    eprintln!("{report:?}");
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.active_trainers, 64, "every trainer steps and syncs");
    assert_eq!(report.events_dropped, 0);
    // Every sync since the subscription reported once, and each trainer's count
    // matches its round numbers.
    assert_eq!(report.rounds_missing, 0);
    assert_eq!(report.counts_unmatched, 0);
    assert!(
        report.stop_took < Duration::from_secs(5),
        "{:?}",
        report.stop_took
    );
    // Flat after warm-up: the last 4 s never above the 3 s mark by more than
    // 10% + 16 MB (`./dev bench soak` watches it for 10 minutes).
    let at = |s: f64| report.memory.iter().find(|(t, _)| *t >= s).map(|m| m.1);
    let warm = at(3.0).unwrap();
    let late_peak = report
        .memory
        .iter()
        .filter(|(t, _)| *t >= 6.0)
        .map(|m| m.1)
        .fold(0.0, f64::max);
    assert!(
        late_peak <= warm * 1.1 + 16.0,
        "resident memory grew from {warm:.0} MB to {late_peak:.0} MB: {:?}",
        report.memory
    );
}
