"""Pictures as text: RapidOCR reads the words a picture shows, and a VLM behind an OpenAI-compatible server is sent
the picture and its caption and answers its description."""

import base64
import http.server
import io
import json

import pytest
from PIL import Image, ImageDraw, ImageFont
from servers import serving_in_thread

from ragscale.data.documents.pictures import OCRDescriber, VLMDescriber


def picture(text: str) -> Image.Image:
    image = Image.new("RGB", (520, 90), "white")
    ImageDraw.Draw(image).text((12, 20), text, fill="black", font=ImageFont.load_default(size=40))
    return image


@pytest.mark.slow
def test_ocr_reads_the_words_a_picture_shows():
    text, method = OCRDescriber().describe(picture("Harbour traffic 1990"), caption="")
    assert text.split() == ["Harbour", "traffic", "1990"] and method == "ocr:rapidocr"


def test_a_vlm_is_sent_the_picture_as_png_with_its_caption_and_its_reply_is_the_text():
    sent = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            sent.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            body = json.dumps({"choices": [{"message": {"content": "  A bar chart of harbour traffic.\n"}}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    image = picture("1990")
    with serving_in_thread(Handler) as url:
        described = VLMDescriber(f"{url}/v1/", "qwen-vl").describe(image, caption="Figure 2: traffic")
    assert described == ("A bar chart of harbour traffic.", "vlm:qwen-vl")
    [(path, payload)] = sent
    assert path == "/v1/chat/completions" and payload["model"] == "qwen-vl"
    prompt, shown = payload["messages"][0]["content"]
    assert prompt["text"].endswith("Its caption: Figure 2: traffic")
    png = base64.b64decode(shown["image_url"]["url"].removeprefix("data:image/png;base64,"))
    assert Image.open(io.BytesIO(png)).tobytes() == image.tobytes()
