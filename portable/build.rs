//! Compiles Beam's portability API from `proto/beam.binpb` (a FileDescriptorSet that
//! `proto/generate.py` takes from the descriptors an installed `apache-beam` wheel embeds), with
//! prost for the messages and tonic for the services: no `protoc` and no Python at build time.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/beam.binpb");
    let bytes = std::fs::read("proto/beam.binpb")?;
    let set = prost_types::FileDescriptorSet::decode(bytes.as_slice())?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(set)?;
    Ok(())
}
