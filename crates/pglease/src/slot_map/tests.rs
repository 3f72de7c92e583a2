//! The slot map's contract, pinned: the hash, the routing key, the text form, and the checks.

use super::*;

#[test]
fn the_hash_is_fnv1a_64() {
    // The published FNV-1a 64 vectors, and a few of our own computed independently.
    assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    assert_eq!(fnv1a_64(b"nightly-report"), 0x3d4e_9826_79a7_b7ab);
    assert_eq!(fnv1a_64("ключ".as_bytes()), 0x2961_30de_6f5b_7a81);
}

#[test]
fn keys_fall_in_fixed_slots() {
    // Contract: these never change (computed outside this code).
    let map = SlotMap::single("s").unwrap();
    for (key, slot) in [
        ("", 8997),
        ("a", 11404),
        ("foobar", 10216),
        ("nightly-report", 14251),
        ("job-42", 8101),
        ("backups", 3108),
        ("scheduler", 2042),
        ("ключ", 14977),
    ] {
        assert_eq!(map.slot_of(key), slot, "{key:?}");
    }
    let eight = SlotMap::even(8, &["s"]).unwrap();
    for (key, slot) in [
        ("", 5),
        ("a", 4),
        ("foobar", 0),
        ("job-42", 5),
        ("scheduler", 2),
    ] {
        assert_eq!(eight.slot_of(key), slot, "{key:?}");
    }
}

#[test]
fn a_semaphores_slot_keys_go_with_its_name() {
    let map = SlotMap::single("s").unwrap();
    // "backups#3" alone would hash to slot 2210.
    assert_eq!(map.slot_of_routing_key("backups#3"), 2210);
    for n in [1, 3, 99, 10_000, 99_999] {
        assert_eq!(map.slot_of(&format!("backups#{n}")), 3108);
    }
    assert_eq!(map.slot_of_semaphore("backups"), 3108);
    // A semaphore named like a slot key keeps its whole name.
    assert_eq!(
        map.slot_of("q#5#2"),
        map.slot_of_semaphore("q#5"),
        "the last # decides"
    );
    for key in [
        "v#0", "v#01", "v#100000", "v#", "#7", "v#1a", "v#-1", "v#+1",
    ] {
        assert_eq!(routing_key(key), key, "{key:?} is not a slot key");
    }
}

#[test]
fn construction_rejects_gaps_overlaps_and_bad_ranges() {
    assert_eq!(
        SlotMap::new(8, [(0..=3, "a"), (5..=7, "b")]),
        Err(SlotMapError::Gap { start: 4, end: 4 })
    );
    assert_eq!(
        SlotMap::new(8, [(1..=7, "a")]),
        Err(SlotMapError::Gap { start: 0, end: 0 })
    );
    assert_eq!(
        SlotMap::new(8, [(0..=5, "a")]),
        Err(SlotMapError::Gap { start: 6, end: 7 })
    );
    assert_eq!(
        SlotMap::new::<_, &str>(8, []),
        Err(SlotMapError::Gap { start: 0, end: 7 })
    );
    assert_eq!(
        SlotMap::new(8, [(4..=7, "b"), (0..=4, "a")]),
        Err(SlotMapError::Overlap { slot: 4 })
    );
    assert_eq!(
        SlotMap::new(8, [(0..=7, "a"), (3..=3, "a")]),
        Err(SlotMapError::Overlap { slot: 3 })
    );
    assert_eq!(
        SlotMap::new(8, [(0..=8, "a")]),
        Err(SlotMapError::OutOfRange {
            start: 0,
            end: 8,
            slots: 8
        })
    );
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = SlotMap::new(8, [(5..=2, "a")]);
    assert_eq!(reversed, Err(SlotMapError::EmptyRange { start: 5, end: 2 }));
    assert_eq!(
        SlotMap::new(0, [(0..=0, "a")]),
        Err(SlotMapError::SlotCount { slots: 0 })
    );
    assert_eq!(
        SlotMap::even(MAX_SLOTS + 1, &["a"]),
        Err(SlotMapError::SlotCount {
            slots: MAX_SLOTS + 1
        })
    );
    for name in ["", "a b", "a,b", "a=b", "a:b", "!a", "é", &"x".repeat(65)] {
        assert_eq!(
            SlotMap::new(1, [(0..=0, name)]),
            Err(SlotMapError::ShardName {
                name: name.to_owned()
            }),
            "{name:?}"
        );
    }
    assert!(SlotMap::new(1, [(0..=0, "db-1.eu_west")]).is_ok());
    assert_eq!(
        SlotMap::even(2, &["a", "b", "c"]),
        Err(SlotMapError::Gap { start: 0, end: 1 })
    );
    assert!(SlotMap::even::<&str>(2, &[]).is_err());
    assert!(SlotMap::even(MAX_SLOTS, &["a", "b", "c"]).is_ok());
}

#[test]
fn ranges_are_merged_and_even_splits_are_contiguous() {
    let map = SlotMap::new(8, [(4..=5, "b"), (0..=1, "a"), (2..=3, "a"), (6..=7, "b")]).unwrap();
    assert_eq!(map.to_string(), "8:0-3=a,4-7=b");
    assert_eq!(map, SlotMap::even(8, &["a", "b"]).unwrap());
    let map = SlotMap::even(10, &["a", "b", "c"]).unwrap();
    assert_eq!(map.to_string(), "10:0-3=a,4-6=b,7-9=c");
    for slot in 0..10 {
        let shard = map.route_slot(slot).unwrap().shard;
        assert_eq!(
            shard,
            ["a", "a", "a", "a", "b", "b", "b", "c", "c", "c"][slot as usize]
        );
    }
    assert_eq!(map.shards(), ["a", "b", "c"]);
}

#[test]
fn pausing_splits_a_run_and_resuming_merges_it_back() {
    let map = SlotMap::even(8, &["a", "b"]).unwrap();
    let paused = map
        .with_paused(0)
        .unwrap()
        .with_paused(7)
        .unwrap()
        .with_paused(5)
        .unwrap();
    assert_eq!(paused.to_string(), "8:!0=a,1-3=a,4=b,!5=b,6=b,!7=b");
    assert!(paused.is_paused(0) && paused.is_paused(5) && paused.is_paused(7));
    assert!(!paused.is_paused(1) && !paused.is_paused(6) && !paused.is_paused(8));
    assert_eq!(
        paused.with_paused(5).unwrap(),
        paused,
        "pausing twice is a no-op"
    );
    let resumed = paused
        .with_resumed(0)
        .unwrap()
        .with_resumed(5)
        .unwrap()
        .with_resumed(7)
        .unwrap();
    assert_eq!(resumed, map);
    assert_eq!(
        map.with_paused(8),
        Err(SlotMapError::OutOfRange {
            start: 8,
            end: 8,
            slots: 8
        })
    );
    let moved = paused.with_assigned(5, "a").unwrap();
    assert_eq!(moved.to_string(), "8:!0=a,1-3=a,4=b,!5=a,6=b,!7=b");
    assert_eq!(
        moved
            .with_resumed(5)
            .unwrap()
            .with_assigned(4, "a")
            .unwrap()
            .to_string(),
        "8:!0=a,1-5=a,6=b,!7=b"
    );
    assert!(map.with_assigned(1, "no good").is_err());
}

#[test]
fn the_text_form_reads_back_as_the_same_map() {
    let maps = [
        SlotMap::single("a").unwrap(),
        SlotMap::even(DEFAULT_SLOTS, &["a", "b", "c"]).unwrap(),
        SlotMap::even(7, &["x1", "x.2", "x_3"])
            .unwrap()
            .with_paused(3)
            .unwrap(),
        SlotMap::even(1, &["solo"]).unwrap().with_paused(0).unwrap(),
    ];
    for map in maps {
        let text = map.to_string();
        assert_eq!(text.parse::<SlotMap>().unwrap(), map, "{text}");
    }
    let spaced: SlotMap = " 0 - 8191 = a ,\t! 8192 = b , 8193-16383=b "
        .parse()
        .unwrap();
    assert_eq!(spaced.to_string(), "16384:0-8191=a,!8192=b,8193-16383=b");
    assert_eq!("4:0-3=a".parse::<SlotMap>().unwrap().slots(), 4);
}

#[test]
fn the_text_form_rejects_what_it_cannot_read() {
    for (text, entry) in [
        ("", ""),
        ("0-3=a,", ""),
        ("4:0-3", "0-3"),
        ("x:0-3=a", "x"),
        ("4:-1-3=a", ""),
        ("4:0--3=a", "-3"),
        ("4:+0-3=a", "+0"),
        ("4:0-99999999999=a", "99999999999"),
        ("4:!!0-3=a", "!0"),
    ] {
        match text.parse::<SlotMap>() {
            Err(SlotMapError::Syntax { entry: e, .. }) => assert_eq!(e, entry, "{text:?}"),
            other => panic!("{text:?}: {other:?}"),
        }
    }
    assert_eq!(
        "4:0-2=a".parse::<SlotMap>(),
        Err(SlotMapError::Gap { start: 3, end: 3 })
    );
    assert_eq!(
        "4:0-3=a,3=b".parse::<SlotMap>(),
        Err(SlotMapError::Overlap { slot: 3 })
    );
    assert_eq!(
        "4:0-3=a:b".parse::<SlotMap>(),
        Err(SlotMapError::ShardName {
            name: "a:b".to_owned()
        })
    );
    assert_eq!(
        "4:0-3=".parse::<SlotMap>(),
        Err(SlotMapError::ShardName {
            name: String::new()
        })
    );
}

#[test]
fn errors_read_well() {
    assert_eq!(
        SlotMapError::Gap { start: 3, end: 3 }.to_string(),
        "slot 3 is assigned to no shard"
    );
    assert_eq!(
        SlotMapError::Gap { start: 3, end: 9 }.to_string(),
        "slots 3-9 are assigned to no shard"
    );
    let e: crate::Error = SlotMapError::Overlap { slot: 2 }.into();
    assert!(e.is_invalid_input() && e.code().is_none());
    assert!(e.to_string().contains("slot 2 is assigned twice"), "{e}");
}
