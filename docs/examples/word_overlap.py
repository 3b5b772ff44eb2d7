"""A complete system: the documents sharing the most words with the question, then one model call."""

from pydantic import BaseModel, Field

from pipelines.engine.systems import Answer, AnswerContext, System

PROMPT = "Answer the question from the documents with a name, a number or a short phrase alone."


class WordOverlapParams(BaseModel):
    documents: int = Field(3, ge=1)  # documents shown to the model
    chars: int = Field(2000, ge=100)  # characters shown of each


class WordOverlap(System[WordOverlapParams]):
    """Ranks documents by the words they share with the question; the model answers from the top ones."""

    Params = WordOverlapParams
    version = "1"  # bump it when what prepare() builds changes (this system builds nothing)
    max_llm_calls = 1  # the run's budget assumes this many calls per answer

    def answer(self, question: str, ctx: AnswerContext) -> Answer:
        words = {w.strip("?,.").lower() for w in question.split() if len(w) > 3}
        ranked = sorted(ctx.corpus.docs, key=lambda d: -len(words & set(d.text.lower().split())))
        top = ranked[: self.params.documents]
        names = [d.filename for d in top]
        ctx.step("rank", inputs={"words": sorted(words)}, outputs=names, kind="retriever")
        shown = "\n\n".join(f"[{d.filename}]\n{d.text[: self.params.chars]}" for d in top)
        reply = ctx.llm.chat([{"role": "system", "content": PROMPT},
                              {"role": "user", "content": f"Question: {question}\n\nDocuments:\n{shown}"}])
        return Answer(text=reply.text.strip() or None, documents=names)
