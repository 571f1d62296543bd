//! `nexmark`: Beam's Nexmark benchmark on Weir. See `nexmark --help`.

/// Queries allocate and free millions of short strings per batch; glibc's allocator returns
/// the memory to the kernel between batches and page-faults it back in (a fifth of Q0's time
/// before this), mimalloc keeps it. Without transparent huge pages (`no_thp`): memory freed
/// between batches came back as 2 MB pages zeroed on first touch (a third of WinningBids' time).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let code = weir_nexmark::launcher::run(std::env::args().skip(1).collect());
    std::process::exit(code);
}
