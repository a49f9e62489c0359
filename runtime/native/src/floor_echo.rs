//! The benchmark floor's answer to `ModelInfer`, made in the core (`bench/pa/floor.py --in-core`): the first
//! input's raw contents echoed as `OUTPUT0`, with no Python at all, so that a benchmark can tell what the
//! transport costs alone from what one hand-over to the event loop adds. Off unless turned on; the runtime never
//! turns it on.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use tonic::Status;

use crate::messages::{
    encode_response, InferOutputTensor, ModelInferRequest, ModelInferResponseHead,
};

#[derive(Default)]
pub struct Echo {
    on: AtomicBool,
    answered: AtomicU64,
}

impl Echo {
    pub fn turn_on(&self) {
        self.on.store(true, Ordering::Relaxed);
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// How many requests it answered.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// The response to `request`: its first input's raw contents as `OUTPUT0`, of that input's datatype and
    /// shape, version "1" (INVALID_ARGUMENT where it has no input in raw contents).
    pub fn answer(&self, request: &ModelInferRequest) -> Result<Bytes, Status> {
        let (Some(first), Some(data)) =
            (request.inputs.first(), request.raw_input_contents.first())
        else {
            return Err(Status::invalid_argument(
                "the floor echoes the first input's raw contents, and none was sent",
            ));
        };
        let head = ModelInferResponseHead {
            model_name: request.model_name.clone(),
            model_version: "1".to_string(),
            id: request.id.clone(),
            parameters: Default::default(),
            outputs: vec![InferOutputTensor {
                name: "OUTPUT0".to_string(),
                datatype: first.datatype.clone(),
                shape: first.shape.clone(),
                parameters: Default::default(),
            }],
        };
        self.answered.fetch_add(1, Ordering::Relaxed);
        Ok(encode_response(&head, &[data]))
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::messages::InferInputTensor;

    fn request(inputs: usize) -> ModelInferRequest {
        ModelInferRequest {
            model_name: "add_one_0".to_string(),
            id: "7".to_string(),
            inputs: (0..inputs)
                .map(|i| InferInputTensor {
                    name: format!("INPUT{i}"),
                    datatype: "FP32".to_string(),
                    shape: vec![1, 4],
                    ..Default::default()
                })
                .collect(),
            raw_input_contents: (0..inputs)
                .map(|i| Bytes::from(vec![i as u8; 16]))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn echoes_the_first_input_and_counts_it() {
        let echo = Echo::default();
        assert!(!echo.is_on());
        let message = echo.answer(&request(2)).unwrap();
        let head = ModelInferResponseHead::decode(message.clone()).unwrap();
        assert_eq!(
            (
                head.model_name.as_str(),
                head.model_version.as_str(),
                head.id.as_str()
            ),
            ("add_one_0", "1", "7")
        );
        assert_eq!(head.outputs.len(), 1);
        assert_eq!(
            (
                head.outputs[0].name.as_str(),
                head.outputs[0].datatype.as_str()
            ),
            ("OUTPUT0", "FP32")
        );
        assert_eq!(head.outputs[0].shape, vec![1, 4]);
        assert!(message.ends_with(&[0u8; 16]));
        assert_eq!(echo.answered(), 1);
    }

    #[test]
    fn refuses_a_request_without_raw_contents() {
        let echo = Echo::default();
        let status = echo.answer(&request(0)).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(echo.answered(), 0);
    }
}
