"""keras_sentemb: contrastive sentence embeddings for Keras 3 / TensorFlow."""

from setuptools import find_packages, setup

setup(
    name="keras-sentemb",
    version="0.1.0",
    description=(
        "Contrastive sentence-embedding training (CT, SimCSE, ConSERT, SG-OPT, "
        "cross-lingual, multitask) on keras-hub backbones."
    ),
    python_requires=">=3.10",
    packages=find_packages(include=["keras_sentemb", "keras_sentemb.*"]),
    package_data={"keras_sentemb": ["resources/**/*", "resources/*"]},
    include_package_data=True,
    install_requires=[
        # Upper bounds: the versions keras_sentemb.compat was checked against
        # (tests/test_compat.py); raise them after that test passes on newer ones.
        "keras>=3.10,<3.16",
        "tensorflow>=2.18,<2.22",
        "keras-hub>=0.21,<0.33",
        "tensorflow-text>=2.18,<2.22",
        "tensorflow-datasets",
        "safetensors",
        # tokenizer.json of exported Hugging Face folders (keras-hub depends on it too).
        "tokenizers",
        "scipy",
        "numpy",
        "matplotlib",
        "threadpoolctl",  # one BLAS thread for the small products of the SentEval classifier
    ],
    extras_require={
        # The suite runs on two processes (pytest-xdist), tests the Beam
        # pipeline, builds the documentation site and runs the notebooks, so
        # the test extra includes the beam, docs and notebook tools. torch,
        # transformers and sentence-transformers check exported Hugging Face
        # folders with the real libraries (the package never imports them);
        # pytrec-eval-terrier and faiss-cpu are the retrieval extra's;
        # ai-edge-litert and mediapipe run exported LiteRT files (in a process
        # of their own; the package never imports them); model2vec loads
        # exported static models (in a process without TensorFlow); mteb runs
        # MTEB's evaluators (in a process of its own, beside the encoder's).
        "test": [
            "pytest>=7", "pytest-xdist>=3.5", "apache-beam>=2.77,<2.78",
            "mkdocs>=1.6,<2", "mkdocs-material>=9.5,<10", "mkdocstrings[python]>=0.26",
            "nbclient>=0.10", "nbformat>=5.10", "ipykernel>=6.29",
            "torch", "transformers", "sentence-transformers", "tokenizers",
            "pytrec-eval-terrier>=0.5.6", "faiss-cpu>=1.8",
            "ai-edge-litert>=2.3", "mediapipe>=1.2.3", "model2vec>=0.9,<0.10",
            "mteb>=2,<3",
        ],
        # The documentation site: `mkdocs serve`, `mkdocs build --strict`.
        "docs": ["mkdocs>=1.6,<2", "mkdocs-material>=9.5,<10", "mkdocstrings[python]>=0.26"],
        # keras_sentemb.beam: the newest Apache Beam that resolves beside
        # TensorFlow 2.21 on Python 3.11 (it needs protobuf < 7, pyarrow < 26).
        "beam": ["apache-beam>=2.77,<2.78"],
        # keras_sentemb.evaluate_retrieval: trec_eval's metrics (pytrec_eval)
        # and the approximate (HNSW) index of faiss.
        "retrieval": ["pytrec-eval-terrier>=0.5.6", "faiss-cpu>=1.8"],
        # Streamed training data in Parquet files (keras_sentemb.data.streams).
        "parquet": ["pyarrow"],
        # Running exported LiteRT files outside TensorFlow: the LiteRT
        # interpreter and MediaPipe's TextEmbedder (export needs neither).
        "litert": ["ai-edge-litert>=2.3", "mediapipe>=1.2.3"],
        # keras_sentemb.evaluate_mteb / `evaluate mteb`: MTEB's own evaluators
        # and results layout (MTEB runs on PyTorch, in a process of its own).
        "mteb": ["mteb>=2,<3"],
    },
    entry_points={"console_scripts": ["keras-sentemb=keras_sentemb.cli:run"]},
)
