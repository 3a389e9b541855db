"""Pictures as text: a vision-language model behind an OpenAI-compatible server, or OCR with RapidOCR.

A describer is anything with ``describe(image, caption=...) -> (text, method)``; empty text when it cannot.
``VLMDescriber`` sends the picture to a VLM (vLLM, SGLang, Ollama; method ``vlm:<model>``); ``OCRDescriber`` reads
its text with RapidOCR, whose wheel ships its ONNX models (method ``ocr:rapidocr``).
"""

from __future__ import annotations

import base64
import io
import json
import urllib.request
from typing import Any, Protocol

import numpy as np

from ragscale.process import REQUEST_TIMEOUT_S


class PictureDescriber(Protocol):
    """Turns a picture into text: ``describe(image, caption=...) -> (text, method)``; empty text if it cannot."""

    def describe(self, image: Any, *, caption: str) -> tuple[str, str]: ...


class OCRDescriber:
    """RapidOCR (ONNX Runtime; the ``rapidocr-onnxruntime`` wheel ships its detection and recognition models).

    Lines recognised with a confidence below ``min_confidence`` are dropped. The engine is loaded once.
    """

    method = "ocr:rapidocr"
    _engine: Any = None

    def __init__(self, min_confidence: float = 0.9) -> None:
        self.min_confidence = min_confidence

    def describe(self, image: Any, *, caption: str) -> tuple[str, str]:
        if OCRDescriber._engine is None:
            try:
                from rapidocr_onnxruntime import RapidOCR
            except ImportError as error:
                raise ImportError("OCR of pictures needs: pip install rapidocr-onnxruntime==1.4.4") from error
            OCRDescriber._engine = RapidOCR()
        result, _ = OCRDescriber._engine(np.array(image.convert("RGB")))
        lines = [text for _, text, score in (result or []) if float(score) >= self.min_confidence]
        return " ".join(lines), self.method


class VLMDescriber:
    """A vision-language model behind an OpenAI-compatible ``/v1/chat/completions`` (vLLM, SGLang, Ollama).

    ``VLMDescriber("http://localhost:8000/v1", "Qwen/Qwen2.5-VL-3B-Instruct")``. The picture is sent as a PNG
    data URL with ``prompt``; the reply is the picture's text, waited for at most ``timeout_s`` seconds.
    """

    prompt = (
        "Describe this picture from a report for a search index. If it is a chart, give its title, axes, "
        "series and the values you can read; if it is a table, write it as a markdown table. Be factual."
    )

    def __init__(
        self, api_base: str, model: str, *, api_key: str = "unused", timeout_s: float = REQUEST_TIMEOUT_S
    ) -> None:
        self.api_base = api_base.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.method = f"vlm:{model}"

    def describe(self, image: Any, *, caption: str) -> tuple[str, str]:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
        prompt = self.prompt + (f"\nIts caption: {caption}" if caption else "")
        payload = {
            "model": self.model,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": prompt}, {"type": "image_url", "image_url": {"url": url}}],
                }
            ],
            "temperature": 0.0,
        }
        request = urllib.request.Request(
            f"{self.api_base}/chat/completions",
            data=json.dumps(payload).encode("utf-8"),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"},
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            reply = json.load(response)
        return reply["choices"][0]["message"]["content"].strip(), self.method
