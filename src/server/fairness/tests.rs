use super::*;

fn member(n: u128, team: &str, weight: f64, team_weight: f64) -> Member {
    Member {
        id: Uuid::from_u128(n),
        username: format!("u{n}"),
        team: team.into(),
        weight,
        team_weight,
        budget: None,
        team_budget: None,
    }
}

fn all(members: &[Member]) -> HashSet<Uuid> {
    members.iter().map(|m| m.id).collect()
}

#[test]
fn equal_weights_owe_equal_shares_and_less_use_stands_first() {
    let ms = [member(1, "a", 1.0, 1.0), member(2, "b", 1.0, 1.0)];
    let usage = HashMap::from([(ms[0].id, 10.0), (ms[1].id, 2.0)]);
    let s = standings(&ms, &usage, &all(&ms));
    assert_eq!(s.of(ms[0].id).value(), 20.0);
    assert_eq!(s.of(ms[1].id).value(), 4.0);
    assert!(s.of(ms[1].id) < s.of(ms[0].id));
    // Someone absent stands even (first).
    assert_eq!(s.of(Uuid::from_u128(99)), Standing::EVEN);
}

#[test]
fn shares_are_hierarchical_over_active_teams_and_teammates() {
    // Team a (weight 3): u1 (1), u2 (3); team b (weight 1): u3; team c (weight 4): nobody active.
    let ms = [
        member(1, "a", 1.0, 3.0),
        member(2, "a", 3.0, 3.0),
        member(3, "b", 1.0, 1.0),
        member(4, "c", 1.0, 4.0),
    ];
    let active: HashSet<Uuid> = ms[..3].iter().map(|m| m.id).collect();
    let sh = Shares::new(&ms, &active);
    assert!((sh.of_user(&ms[0], true) - 0.75 * 0.25).abs() < 1e-12);
    assert!((sh.of_user(&ms[1], true) - 0.75 * 0.75).abs() < 1e-12);
    assert!((sh.of_user(&ms[2], true) - 0.25).abs() < 1e-12);
    // An inactive team's share counts it in: 4 / (3 + 1 + 4).
    assert!((sh.of_user(&ms[3], false) - 0.5).abs() < 1e-12);
    assert!((sh.of_team("c", 4.0) - 0.5).abs() < 1e-12);
    // The same usage: the user owed more stands first.
    let usage: HashMap<Uuid, f64> = ms.iter().map(|m| (m.id, 1.0)).collect();
    let s = standings(&ms, &usage, &active);
    assert!(s.of(ms[1].id) < s.of(ms[0].id));
    assert!(s.of(ms[2].id) < s.of(ms[0].id));
}

#[test]
fn an_idle_teammate_does_not_shrink_the_share_of_the_one_who_works() {
    let ms = [
        member(1, "big", 1.0, 1.0),
        member(2, "big", 1.0, 1.0),
        member(3, "solo", 1.0, 1.0),
    ];
    let active: HashSet<Uuid> = [ms[0].id, ms[2].id].into_iter().collect();
    let sh = Shares::new(&ms, &active);
    assert!((sh.of_user(&ms[0], true) - 0.5).abs() < 1e-12);
    assert!((sh.of_user(&ms[2], true) - 0.5).abs() < 1e-12);
}

#[test]
fn standings_order_totally_and_never_negative() {
    assert_eq!(Standing::new(-0.0), Standing::EVEN);
    assert_eq!(Standing::new(-3.0), Standing::EVEN);
    assert_eq!(Standing::new(f64::NAN), Standing::EVEN);
    assert_eq!(Standing::of(1.0, 0.0).value(), f64::MAX);
    assert_eq!(Standing::of(f64::INFINITY, 1.0), Standing::EVEN);
    assert!(Standing::of(1.0, 0.5) > Standing::of(1.0, 1.0));
}
