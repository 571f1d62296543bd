//! Beam's portability API: the Runner API (pipelines), the Fn API (harness control, data,
//! state, logging and provision), the Job API and the artifact API, with Beam's packages,
//! message names and field numbers, as prost and tonic compile them.
#![allow(missing_docs, clippy::all)]

/// `org.apache.beam.model.pipeline.v1`: pipelines, transforms, coders, windowing.
pub mod pipeline {
    #[allow(missing_docs, clippy::all)]
    pub mod v1 {
        tonic::include_proto!("org.apache.beam.model.pipeline.v1");
    }
}

/// `org.apache.beam.model.fn_execution.v1`: the Fn API and provision service.
pub mod fn_execution {
    #[allow(missing_docs, clippy::all)]
    pub mod v1 {
        tonic::include_proto!("org.apache.beam.model.fn_execution.v1");
    }
}

/// `org.apache.beam.model.job_management.v1`: the Job API and the artifact API.
pub mod job_management {
    #[allow(missing_docs, clippy::all)]
    pub mod v1 {
        tonic::include_proto!("org.apache.beam.model.job_management.v1");
    }
}
