"""Cut the detected text regions out of the image: one crop and one box per connected region of heat.

Inputs `heatmap` FP32 [1, 1, H, W] (the detector's output), `image` FP32 [1, 1, H, W] (what it looked at) and
`image_size` INT32 [2] (the original height and width) -> outputs `crops` FP32 [-1, 1, h, w] (each region's
bounding box of `image`, scaled to height h keeping its aspect ratio (squeezed to w if wider), paper (1.0) to
its right; h and w from the output's `dims` in config.pbtxt) and `boxes` INT32 [-1, 4]
(left, top, right, bottom in original pixels, right and bottom exclusive), one row per region in reading order
(top to bottom, then left to right). The number of regions varies, 0 included. Parameters: `threshold` (heat
that counts, default 0.5), `min_pixels` (smaller regions are noise, default 4), `max_crops` (the largest
regions kept, default 16). Not batching. Runs unchanged on Triton's python backend.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image

NEIGHBOURS = ((1, 0), (-1, 0), (0, 1), (0, -1))


def regions(mask):
    """Bounding boxes (top, left, bottom, right; inclusive) and sizes of the 4-connected True regions."""
    seen = np.zeros(mask.shape, dtype=bool)
    found = []
    height, width = mask.shape
    for start in zip(*np.nonzero(mask), strict=True):
        if seen[start]:
            continue
        seen[start] = True
        stack = [start]
        top, left, bottom, right, size = start[0], start[1], start[0], start[1], 0
        while stack:
            y, x = stack.pop()
            size += 1
            top, bottom, left, right = min(top, y), max(bottom, y), min(left, x), max(right, x)
            for dy, dx in NEIGHBOURS:
                ny, nx = y + dy, x + dx
                if 0 <= ny < height and 0 <= nx < width and mask[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    stack.append((ny, nx))
        found.append(((int(top), int(left), int(bottom), int(right)), size))
    return found


def reading_order(boxes):
    """Boxes (top, left, bottom, right) line by line: a box joins the first line whose first box spans its
    vertical centre; lines go top to bottom, boxes within a line left to right."""
    lines = []
    for box in sorted(boxes):
        centre = (box[0] + box[2]) / 2
        for line in lines:
            if line[0][0] <= centre <= line[0][2]:
                line.append(box)
                break
        else:
            lines.append([box])
    return [box for line in lines for box in sorted(line, key=lambda b: b[1])]


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        crops = pb_utils.get_output_config_by_name(config, "crops")
        self.dtype = pb_utils.triton_string_to_numpy(crops["data_type"])
        self.crop_height, self.crop_width = (int(d) for d in crops["dims"][-2:])
        parameters = config.get("parameters", {})
        self.threshold = float(parameters.get("threshold", {}).get("string_value", "0.5"))
        self.min_pixels = int(parameters.get("min_pixels", {}).get("string_value", "4"))
        self.max_crops = int(parameters.get("max_crops", {}).get("string_value", "16"))
        if self.max_crops < 1:
            raise pb_utils.TritonModelException(f"max_crops must be at least 1, got {self.max_crops}")

    def execute(self, requests):
        return [self._crop(request) for request in requests]

    def _crop(self, request):
        heatmap = pb_utils.get_input_tensor_by_name(request, "heatmap").as_numpy()
        image = pb_utils.get_input_tensor_by_name(request, "image").as_numpy()
        size = pb_utils.get_input_tensor_by_name(request, "image_size").as_numpy().reshape(-1)
        if heatmap.shape != image.shape or heatmap.ndim != 4 or heatmap.shape[:2] != (1, 1) or size.size != 2:
            error = pb_utils.TritonError(
                f"crop_boxes: heatmap {list(heatmap.shape)} and image {list(image.shape)} must both be "
                f"[1, 1, H, W], image_size {list(size.shape)} must be [2]"
            )
            return pb_utils.InferenceResponse(output_tensors=[], error=error)
        heat, grey = heatmap[0, 0], image[0, 0].astype(np.float32)
        found = [r for r in regions(heat > self.threshold) if r[1] >= self.min_pixels]
        largest = sorted(found, key=lambda r: (-r[1], r[0]))[: self.max_crops]
        kept = reading_order([box for box, _ in largest])
        scale_y, scale_x = float(size[0]) / heat.shape[0], float(size[1]) / heat.shape[1]
        crops = np.ones((len(kept), 1, self.crop_height, self.crop_width), dtype=self.dtype)
        boxes = np.zeros((len(kept), 4), dtype=np.int32)
        for index, (top, left, bottom, right) in enumerate(kept):
            region = Image.fromarray(np.ascontiguousarray(grey[top : bottom + 1, left : right + 1]))  # mode F
            scaled = min(self.crop_width, max(1, round(region.width * self.crop_height / region.height)))
            resized = region.resize((scaled, self.crop_height), Image.Resampling.BILINEAR)
            crops[index, 0, :, :scaled] = np.asarray(resized, dtype=np.float32)
            boxes[index] = (
                int(np.floor(left * scale_x)),
                int(np.floor(top * scale_y)),
                int(min(np.ceil((right + 1) * scale_x), size[1])),
                int(min(np.ceil((bottom + 1) * scale_y), size[0])),
            )
        outputs = [pb_utils.Tensor("crops", crops), pb_utils.Tensor("boxes", boxes)]
        return pb_utils.InferenceResponse(output_tensors=outputs)
