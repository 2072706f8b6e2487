fn main() {
    println!("{} bytes of eBPF", causeway::ebpf_object::EBPF_OBJECT.len());
}
