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
        "keras>=3.10",
        "tensorflow>=2.18",
        "keras-hub>=0.21",
        "tensorflow-text>=2.18",
        "tensorflow-datasets",
        "safetensors",
        "scipy",
        "numpy",
        "matplotlib",
    ],
    extras_require={"test": ["pytest>=7"]},
    entry_points={"console_scripts": ["keras-sentemb=keras_sentemb.cli:main"]},
)
