//! The one table of program names (`bpf_maps::programs`) matches the
//! embedded eBPF object both ways: every program in the table is in the
//! object with the table's kind, and the object has no program the table
//! does not list. Parsed with aya-obj (no loading, no root).

use aya_obj::{programs::XdpAttachType, Object, ProgramSection};
use bpf_maps::programs::{ProgramKind, ALL};
use causeway::ebpf_object::EBPF_OBJECT;

fn kind_of(section: &ProgramSection) -> Option<ProgramKind> {
    match section {
        ProgramSection::Xdp { .. } => Some(ProgramKind::Xdp),
        ProgramSection::SchedClassifier => Some(ProgramKind::SchedClassifier),
        _ => None,
    }
}

#[test]
fn every_program_in_the_table_is_in_the_object_with_its_kind() {
    let object = Object::parse(EBPF_OBJECT).expect("the embedded object parses");
    for spec in ALL {
        let program = object
            .programs
            .get(spec.name)
            .unwrap_or_else(|| panic!("{} is in the table but not in the object", spec.name));
        assert_eq!(
            kind_of(&program.section),
            Some(spec.kind),
            "{}: section {:?}",
            spec.name,
            program.section
        );
        if let ProgramSection::Xdp { attach_type, .. } = &program.section {
            assert!(
                matches!(attach_type, XdpAttachType::Interface),
                "{}: an XDP program for interfaces, not {attach_type:?}",
                spec.name
            );
        }
    }
}

#[test]
fn the_object_has_no_program_missing_from_the_table() {
    let object = Object::parse(EBPF_OBJECT).expect("the embedded object parses");
    let mut names: Vec<&str> = object.programs.keys().map(String::as_str).collect();
    names.sort_unstable();
    let mut table: Vec<&str> = ALL.iter().map(|p| p.name).collect();
    table.sort_unstable();
    assert_eq!(names, table);
}

#[test]
fn names_are_unique_and_fit_a_pin_name() {
    let mut seen = std::collections::HashSet::new();
    for spec in ALL {
        assert!(seen.insert(spec.name), "{} twice", spec.name);
        assert!(spec.name.starts_with("causeway_"), "{}", spec.name);
        assert_eq!(bpf_maps::programs::spec(spec.name), Some(spec));
    }
    assert!(ALL.iter().filter(|p| p.attached).count() == 3);
}
