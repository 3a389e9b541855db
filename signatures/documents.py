"""What is asked of the model at ingestion: situating a chunk within its document (contextual retrieval)."""

import dspy


class Situate(dspy.Signature):
    """Write one or two sentences that situate the chunk within the document, to improve search retrieval of
    the chunk: say which document it comes from, which section or topic it belongs to, and what it is about.
    Reply with the context only."""

    document: str = dspy.InputField(desc="the whole document, or the part of it around the chunk")
    chunk: str = dspy.InputField(desc="a piece of the document: text, a markdown table or a picture description")
    context: str = dspy.OutputField(desc="one or two sentences")
