"""A vector's score is read by its model's cosine band (issue 41): multilingual-e5-small's
cosines crowd into 0.75 to 0.9, where MiniLM's floor of 0.25 made every vector score alike and
the keyword side decided (XQuAD's Russian hybrid under e5's vectors alone, 0.909 < 0.952)."""

import math

import numpy as np
import pytest

from hybridsql.embedding.models import DEFAULT_BAND, KNOWN, cosine_band
from hybridsql.errors import QueryError
from hybridsql.indexing.index import HybridIndex
from hybridsql.search.options import SearchOptions, with_band

E5 = KNOWN["multilingual-e5-small"]


def test_each_model_has_its_band_and_an_unknown_one_the_default():
    assert cosine_band("multilingual-e5-small") == cosine_band(E5.model_id) == (0.8, 0.9)
    assert cosine_band("all-MiniLM-L6-v2") == DEFAULT_BAND == (0.25, 1.0)
    assert cosine_band("text-embedding-3-small") == cosine_band(None) == DEFAULT_BAND


@pytest.mark.parametrize(
    "floor, ceiling, model, expected",
    [
        (None, None, E5.model_id, (0.8, 0.9)),
        (None, None, "all-MiniLM-L6-v2-int8", (0.25, 1.0)),
        (0.5, None, E5.model_id, (0.5, 0.9)),  # the model's ceiling, above the floor
        (0.95, None, E5.model_id, (0.95, 1.0)),  # the model's is not: 1
        (None, 0.95, E5.model_id, (0.8, 0.95)),
        (None, 0.5, E5.model_id, (0.0, 0.5)),  # the model's floor is not below it: 0
        (0.1, 0.2, E5.model_id, (0.1, 0.2)),  # both given: as they are
    ],
)
def test_a_search_takes_what_it_is_given_and_the_rest_from_the_model(
    floor, ceiling, model, expected
):
    opts = with_band(SearchOptions(vector_floor=floor, vector_ceiling=ceiling), model)
    assert (opts.vector_floor, opts.vector_ceiling) == expected
    opts.check()


@pytest.mark.parametrize(
    "options, line",
    [
        ({"vector_ceiling": 0.0}, r"^vector_ceiling must be in \(0, 1\], not 0.0$"),
        ({"vector_ceiling": 1.5}, r"^vector_ceiling must be in \(0, 1\], not 1.5$"),
        (
            {"vector_floor": 0.9, "vector_ceiling": 0.9},
            r"^vector_floor must be below vector_ceiling, not 0.9 and 0.9$",
        ),
        ({"vector_ceiling": math.nan}, r"^vector_ceiling must be a finite number, not nan$"),
    ],
)
def test_a_band_no_score_can_come_from_is_one_line(options, line):
    with pytest.raises(QueryError, match=line):
        SearchOptions(**options).check()


class Tagged:
    """Vectors made as e5's would be for these texts, tagged with e5's id: a search of its index
    reads them by e5's band. Each text's vector is fixed, so the cosines are known."""

    dims = 4

    def __init__(self, model_id: str):
        self.model_id = model_id

    def embed(self, texts):
        return np.array([vector(t) for t in texts], dtype=np.float32)


def vector(text: str) -> np.ndarray:
    """A unit vector whose cosine to the query's (1, 0, 0, 0) is the number the text ends with
    (the query itself: 1)."""
    cos = float(text.rsplit(" ", 1)[-1]) if text[-1].isdigit() else 1.0
    return np.array([cos, math.sqrt(1 - cos * cos), 0, 0], dtype=np.float32)


@pytest.mark.parametrize(
    "model_id, band", [(E5.model_id, (0.8, 0.9)), ("another-model", DEFAULT_BAND)]
)
def test_the_statement_scores_a_vector_by_its_model_band(tmp_path, model_id, band):
    folder = tmp_path / "notes"
    folder.mkdir()
    cosines = (0.95, 0.88, 0.84, 0.79, 0.5)
    for i, cos in enumerate(cosines):
        (folder / f"{i}.md").write_text(f"note {i} cosine {cos}\n")
    floor, ceiling = band
    with HybridIndex(str(tmp_path / "i.db"), embedder=Tagged(model_id)) as idx:
        idx.index_folder(str(folder))
        found = idx.search("anything", mode="semantic", min_score=0.0, decay=False)
        assert (found.params["vector_floor"], found.params["vector_ceiling"]) == band
        scores = {r.path: r.relevance for r in found}
        for i, cos in enumerate(cosines):
            expected = 0.7 * max(0.0, (cos - floor) / (ceiling - floor))
            if cos < floor:  # noise: not a vector candidate at all
                assert f"{i}.md" not in scores
            else:
                assert scores[f"{i}.md"] == pytest.approx(expected, abs=1e-6)
        # Above the ceiling a better cosine still ranks higher: the order is the cosines'.
        assert [r.path for r in found] == [f"{i}.md" for i, c in enumerate(cosines) if c >= floor]
        # A band given by the search is the one it reads by, whatever the model's.
        given = idx.search("anything", mode="semantic", vector_floor=0.0, vector_ceiling=1.0)
        assert (given.params["vector_floor"], given.params["vector_ceiling"]) == (0.0, 1.0)
