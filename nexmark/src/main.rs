//! `nexmark`: Beam's Nexmark benchmark on Weir. See `nexmark --help`.

fn main() {
    let code = weir_nexmark::launcher::run(std::env::args().skip(1).collect());
    std::process::exit(code);
}
