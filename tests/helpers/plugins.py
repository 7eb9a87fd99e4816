"""Installed-looking plugin distributions for the method registry's entry points."""


def installed_plugin(folder, name, module_source):
    """A distribution `NAME-plugin 0.1` in `folder` whose entry point `NAME` is module `NAME_mod`."""
    (folder / f"{name}_mod.py").write_text(module_source, encoding="utf-8")
    info = folder / f"{name}_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}-plugin\nVersion: 0.1\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(
        f"[keras_sentemb.methods]\n{name} = {name}_mod\n", encoding="utf-8")
