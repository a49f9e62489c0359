//! Which `ModelInfer` requests the in-core ONNX lane (crate::ort_lane) may answer, decided by comparing the
//! request's bytes with what the Python data plane registered for the model: pure, no ONNX Runtime here.
//!
//! The data plane keeps what a request means. It registers a model version's signature (the config's inputs and
//! outputs, their datatypes and dims, the batch bound) once it has decided that version serves; the lane only
//! matches requests against it. Anything that does not match exactly (parameters, typed contents, another
//! version, a shape the config does not allow, a size that does not add up) is handed to Python unchanged, which
//! answers it as it always has, error messages included.

use crate::messages::{InferParameter, ModelInferRequest, ParameterChoice};

/// A KServe datatype the lane carries as raw bytes, with its element's size.
pub fn element_size(datatype: &str) -> Option<usize> {
    Some(match datatype {
        "BOOL" | "UINT8" | "INT8" => 1,
        "UINT16" | "INT16" | "FP16" => 2,
        "UINT32" | "INT32" | "FP32" => 4,
        "UINT64" | "INT64" | "FP64" => 8,
        _ => return None,
    })
}

/// One input or output as the model's config declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub datatype: String,
    /// The config's dims (without the batch dimension of a batching model); -1: any size.
    pub dims: Vec<i64>,
}

/// What the data plane registered for one model version.
#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// The config's `max_batch_size`: 0 for a model without batching, else the bound on the first dimension.
    pub max_batch_size: i64,
}

/// A request the lane takes: for each of the signature's inputs, the request's input (and raw contents) that
/// feeds it; the signature's outputs to answer, in the order of the response.
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub feeds: Vec<usize>,
    pub outputs: Vec<usize>,
}

/// Why a request goes to Python instead (for tests and counters; Python says what is wrong, if anything is).
pub type Pass = &'static str;

impl Signature {
    /// Whether the lane can carry this signature at all: raw numeric tensors only, without repeats.
    pub fn carried(&self) -> Result<(), String> {
        let tensors = self.inputs.iter().chain(&self.outputs);
        for tensor in tensors.clone() {
            if element_size(&tensor.datatype).is_none() {
                return Err(format!(
                    "'{}' is {}: the lane carries numeric tensors only",
                    tensor.name, tensor.datatype
                ));
            }
        }
        let mut names: Vec<&str> = tensors.map(|t| t.name.as_str()).collect();
        let all = names.len();
        names.sort_unstable();
        names.dedup();
        if names.len() != all || self.inputs.is_empty() || self.outputs.is_empty() {
            return Err(
                "inputs and outputs must be named once each, at least one of each".to_string(),
            );
        }
        Ok(())
    }

    /// The plan for `request`, or why Python answers it.
    pub fn plan(&self, request: &ModelInferRequest) -> Result<Plan, Pass> {
        if !request.parameters.iter().all(no_effect) {
            return Err("request parameters");
        }
        if request.inputs.len() != self.inputs.len()
            || request.raw_input_contents.len() != request.inputs.len()
        {
            return Err("not every input, in raw contents");
        }
        let mut feeds = vec![usize::MAX; self.inputs.len()];
        let mut batch: Option<i64> = None;
        for (at, input) in request.inputs.iter().enumerate() {
            if !input.parameters.is_empty() || input.contents.is_some() {
                return Err("input parameters or typed contents");
            }
            let Some(slot) = self.inputs.iter().position(|spec| spec.name == input.name) else {
                return Err("an input the config does not name");
            };
            if feeds[slot] != usize::MAX {
                return Err("an input named twice");
            }
            let spec = &self.inputs[slot];
            if input.datatype != spec.datatype {
                return Err("an input's datatype");
            }
            let dims = match self.max_batch_size {
                0 => input.shape.as_slice(),
                bound => {
                    let Some((&first, rest)) = input.shape.split_first() else {
                        return Err("a batching model's input without a batch dimension");
                    };
                    if first < 1 || first > bound || batch.is_some_and(|seen| seen != first) {
                        return Err("a batch size out of bounds or unlike the other inputs'");
                    }
                    batch = Some(first);
                    rest
                }
            };
            if !fits(&spec.dims, dims) {
                return Err("a shape the config does not allow");
            }
            let bytes = element_size(&spec.datatype)
                .and_then(|size| elements(&input.shape)?.checked_mul(size));
            if bytes != Some(request.raw_input_contents[at].len()) {
                return Err("raw contents whose size is not the shape's");
            }
            feeds[slot] = at;
        }
        let outputs = if request.outputs.is_empty() {
            (0..self.outputs.len()).collect()
        } else {
            let mut chosen = Vec::with_capacity(request.outputs.len());
            for asked in &request.outputs {
                let found = self.outputs.iter().position(|spec| spec.name == asked.name);
                match found {
                    Some(slot) if asked.parameters.is_empty() && !chosen.contains(&slot) => {
                        chosen.push(slot)
                    }
                    _ => return Err("an output not plainly named, or named twice"),
                }
            }
            chosen
        };
        Ok(Plan { feeds, outputs })
    }
}

/// Whether a request parameter changes nothing about a unary request to a model the lane serves: only
/// `triton_enable_empty_final_response` as a bool (perf_analyzer sends it with every request; it concerns a
/// decoupled model's stream, and the lane serves neither).
fn no_effect((name, value): (&String, &InferParameter)) -> bool {
    name == EMPTY_FINAL && matches!(value.choice, Some(ParameterChoice::Bool(_)))
}

const EMPTY_FINAL: &str = "triton_enable_empty_final_response";

/// Whether a request's dims match the config's (-1 takes any size).
fn fits(config: &[i64], dims: &[i64]) -> bool {
    config.len() == dims.len()
        && config
            .iter()
            .zip(dims)
            .all(|(&want, &got)| got >= 0 && (want == -1 || want == got))
}

/// The number of elements of a shape, None where it overflows or has a negative dimension.
fn elements(shape: &[i64]) -> Option<usize> {
    shape.iter().try_fold(1usize, |count, &dim| {
        count.checked_mul(usize::try_from(dim).ok()?)
    })
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::messages::{InferInputTensor, InferRequestedOutputTensor};

    fn spec(name: &str, datatype: &str, dims: &[i64]) -> TensorSpec {
        TensorSpec {
            name: name.to_string(),
            datatype: datatype.to_string(),
            dims: dims.to_vec(),
        }
    }

    fn add_sub(max_batch_size: i64) -> Signature {
        Signature {
            inputs: vec![spec("INPUT0", "FP32", &[4]), spec("INPUT1", "FP32", &[-1])],
            outputs: vec![spec("OUTPUT0", "FP32", &[4]), spec("OUTPUT1", "FP32", &[4])],
            max_batch_size,
        }
    }

    fn input(name: &str, datatype: &str, shape: &[i64]) -> InferInputTensor {
        InferInputTensor {
            name: name.to_string(),
            datatype: datatype.to_string(),
            shape: shape.to_vec(),
            ..Default::default()
        }
    }

    /// INPUT1 then INPUT0 (the lane feeds by name), FP32 [shape], with contents of `bytes` each.
    fn request(shape: &[i64], bytes: usize) -> ModelInferRequest {
        ModelInferRequest {
            model_name: "add_sub".to_string(),
            inputs: vec![
                input("INPUT1", "FP32", shape),
                input("INPUT0", "FP32", shape),
            ],
            raw_input_contents: vec![Bytes::from(vec![0u8; bytes]); 2],
            ..Default::default()
        }
    }

    #[test]
    fn a_plain_request_is_fed_by_name_and_answers_every_output_in_order() {
        assert_eq!(
            add_sub(0).plan(&request(&[4], 16)),
            Ok(Plan {
                feeds: vec![1, 0],
                outputs: vec![0, 1]
            })
        );
    }

    #[test]
    fn the_outputs_asked_for_are_answered_in_the_order_asked() {
        let mut asked = request(&[4], 16);
        asked.outputs = vec![InferRequestedOutputTensor {
            name: "OUTPUT1".to_string(),
            ..Default::default()
        }];
        assert_eq!(add_sub(0).plan(&asked).map(|p| p.outputs), Ok(vec![1]));
        asked.outputs.push(asked.outputs[0].clone());
        assert!(add_sub(0).plan(&asked).is_err());
        asked.outputs[1].name = "OUTPUT9".to_string();
        assert!(add_sub(0).plan(&asked).is_err());
    }

    #[test]
    fn a_batching_model_takes_a_shared_batch_within_its_bound() {
        assert!(add_sub(8).plan(&request(&[3, 4], 48)).is_ok());
        assert!(add_sub(8).plan(&request(&[9, 4], 144)).is_err());
        assert!(add_sub(8).plan(&request(&[0, 4], 0)).is_err());
        assert!(add_sub(8).plan(&request(&[4], 16)).is_err());
        let mut unlike = request(&[2, 4], 32);
        unlike.inputs[1].shape = vec![1, 4];
        unlike.raw_input_contents[1] = Bytes::from(vec![0u8; 16]);
        assert!(add_sub(8).plan(&unlike).is_err());
    }

    #[test]
    fn what_the_config_does_not_allow_goes_to_python() {
        let signature = add_sub(0);
        assert!(signature.plan(&request(&[5], 20)).is_err()); // INPUT0 is [4]
        assert!(signature.plan(&request(&[4], 15)).is_err()); // bytes not the shape's
        let mut typed = request(&[4], 16);
        typed.inputs[0].datatype = "INT32".to_string();
        assert!(signature.plan(&typed).is_err());
        let mut parameters = request(&[4], 16);
        parameters
            .parameters
            .insert("sequence_id".to_string(), InferParameter::default());
        assert!(signature.plan(&parameters).is_err());
        let mut empty_final = request(&[4], 16);
        let flag = |choice| InferParameter {
            choice: Some(choice),
        };
        empty_final
            .parameters
            .insert(EMPTY_FINAL.to_string(), flag(ParameterChoice::Bool(true)));
        assert!(signature.plan(&empty_final).is_ok()); // perf_analyzer's, a no-op here
        empty_final
            .parameters
            .insert(EMPTY_FINAL.to_string(), flag(ParameterChoice::Int64(1)));
        assert!(signature.plan(&empty_final).is_err());
        let mut twice = request(&[4], 16);
        twice.inputs[1].name = "INPUT1".to_string();
        assert!(signature.plan(&twice).is_err());
        let mut missing = request(&[4], 16);
        missing.inputs.pop();
        missing.raw_input_contents.pop();
        assert!(signature.plan(&missing).is_err());
        let mut negative = request(&[-1], 0);
        negative.inputs[0].shape = vec![4];
        negative.raw_input_contents[0] = Bytes::from(vec![0u8; 16]);
        assert!(signature.plan(&negative).is_err());
    }

    #[test]
    fn a_shape_whose_size_overflows_is_not_taken() {
        let mut huge = request(&[4], 16);
        huge.inputs[0].shape = vec![i64::MAX];
        assert!(Signature {
            inputs: vec![spec("INPUT0", "FP32", &[-1]), spec("INPUT1", "FP32", &[-1])],
            ..add_sub(0)
        }
        .plan(&huge)
        .is_err());
    }

    #[test]
    fn only_numeric_signatures_named_once_are_carried() {
        assert!(add_sub(0).carried().is_ok());
        let mut strings = add_sub(0);
        strings.inputs[0].datatype = "BYTES".to_string();
        assert!(strings.carried().is_err());
        let mut repeated = add_sub(0);
        repeated.outputs[0].name = "INPUT0".to_string();
        assert!(repeated.carried().is_err());
    }
}
