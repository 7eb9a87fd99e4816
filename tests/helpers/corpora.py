"""Sentences, pairs and triplets the tests train and evaluate on (fixed seeds, fixed texts)."""

import numpy as np

CORPUS_WORDS = ["a", "the", "man", "woman", "dog", "cat", "plays", "guitar", "piano",
                "runs", "sits", "on", "mat", "park", "in", "hello", "world"]
_RNG = np.random.default_rng(0)
# 300 random sentences of 2-8 words, and 20 scored dev pairs of them.
CORPUS = [" ".join(_RNG.choice(CORPUS_WORDS, size=_RNG.integers(2, 9))) for _ in range(300)]
DEV = [(CORPUS[i], CORPUS[i + 1], float(i % 5)) for i in range(0, 40, 2)]

# Eight short sentences, four (anchor, positive, hard negative) triplets and
# three scored dev pairs.
SENTENCES = [
    "a man is playing a guitar .", "the cat sits on the mat", "a woman plays piano",
    "the dog runs in the park", "hello world", "a man and a woman are playing",
    "the cat runs", "a dog sits on the mat",
]
TRIPLETS = [
    ("a man is playing a guitar", "a man plays", "a cat sits"),
    ("the dog runs in the park", "a dog runs", "the dog sits"),
    ("a woman plays piano", "a woman is playing", "a man sits"),
    ("hello world", "hello", "the cat runs"),
]
SHORT_DEV = [("a man is playing a guitar .", "a man plays guitar", 4.0),
             ("the cat sits", "a dog runs", 0.5), ("hello world", "hello", 3.0)]

# Eight more short sentences (the self-guided trainer's batch).
GUIDED_SENTENCES = [
    "a man is playing guitar", "the dog runs in the park", "a cat sits on the mat",
    "the woman plays piano", "a man plays the piano", "the cat runs",
    "hello world", "a dog sits in the cafe",
]

# Six sentences and the 15 pairs of them with scores spread over 0-5.
STS_SENTENCES = [
    "a man is playing a guitar .", "the cat sits on the mat", "a woman plays piano",
    "hello world", "the dog runs in the park", "a dog sits on the mat",
]
STS_PAIRS = [
    (STS_SENTENCES[i], STS_SENTENCES[j], float((3 * i + j) % 11) * 0.5)
    for i in range(len(STS_SENTENCES)) for j in range(len(STS_SENTENCES)) if i < j
]

# Sentences of very different lengths (1 to 14 words), for bucket-padded batches.
UNEVEN_CORPUS = [
    "a man", "the cat sits on the mat and the dog sits on the mat too", "hello world", "x",
    "the woman plays the piano in the park", "a dog runs", "the man is playing a guitar",
] * 4

# Eight sentences the multitask folder's rows are made of.
MULTITASK_SENTENCES = [
    "a man is playing guitar", "the woman plays piano", "a dog runs in the park",
    "the cat sits on the mat", "hello world", "a man plays piano",
    "the dog sits", "a woman is playing guitar",
]

# STS-B, STS12 and SICK in miniature: (sentence 1, sentence 2, score) rows.
STSB_TEST = [
    ("a girl is styling her hair .", "a girl is brushing her hair .", 2.5),
    ("a man plays the guitar .", "a man is playing a guitar .", 4.8),
    ("the cat sat on the mat .", "dogs run in the park .", 0.2),
    ('he said "no" .', "he said yes .", 1.4),
    ("a woman slices onions .", "a woman is cutting an onion .", 4.2),
    ("stocks fell sharply today .", "a child rides a bike .", 0.0),
]
STSB_DEV = [
    ("a dog barks .", "a dog is barking .", 4.9),
    ("a man cooks .", "a girl sings loudly .", 0.5),
    ("two kids play ball .", "two children are playing with a ball .", 4.4),
]
STSB_TRAIN = [
    ("birds fly south .", "birds migrate south in winter .", 3.7),
    ("a car drives fast .", "the moon is bright .", 0.1),
    ("a man reads a book .", "a person is reading .", 3.2),
    ("zebra quartz vex .", "a man reads a book .", 0.3),
]
STS12_A = [  # 4 lines, one unscored -> 3 pairs
    ("the president spoke today .", "the president gave a speech .", 4.0),
    ("a cat eats fish .", "markets rallied on friday .", 0.5),
    ("UNSCORED pair one .", "UNSCORED pair two .", None),
    ("a boy jumps .", "a boy is jumping high .", 3.5),
]
STS12_B = [  # 6 pairs
    ("rain falls .", "it is raining .", 4.5),
    ("a plane lands .", "cheese is made of milk .", 0.0),
    ("a man plays the guitar .", "a man is playing a guitar .", 5.0),
    ("she writes a letter .", "she is writing .", 3.0),
    ("the sun sets .", "taxes rise again .", 0.8),
    ("kids swim in a pool .", "children are swimming .", 4.1),
]
SICK_TEST = [
    ("A man is playing a flute", "A man is playing a flute loudly", 4.6),
    ("A dog is running", "A cat is sleeping", 1.8),
    ("Two women are dancing", "Two women are dancing on a stage", 4.3),
    ("A chef is cooking", "Nobody is cooking", 2.9),
    ("A boy is riding a horse", "The sky is blue", 1.0),
]
SICK_TRIAL = [
    ("A woman is slicing a tomato", "A woman is cutting a tomato", 4.9),
    ("A man is sleeping", "A girl is jumping rope", 1.1),
    ("Kids are playing", "Children are playing outside", 4.0),
]

PAIR_WORDS = ["a", "the", "man", "woman", "is", "playing", "guitar", "piano", "dog",
              "cat", "runs", "sits", "on", "mat", "park", "in", "and"]


def make_pairs(n, seed=0):
    """`n` (English, pseudo-target) pairs with unique sources and targets."""
    rng = np.random.default_rng(seed)
    pairs = []
    for i in range(n):
        words = rng.choice(PAIR_WORDS, size=rng.integers(2, 7))
        src = " ".join(words) + f" {i}"  # unique sources
        tgt = " ".join(["中" if w in ("a", "the", "is") else "文" for w in words] + list(words[::-1]))
        pairs.append((src, tgt + f" {i}"))
    return pairs
