"""The one table of llama-server's flags (``core.llama_flags``) against the build's own ``--help``, and the two
readers of it: the capacity settings (``core.llama_argv``) and the drop-in simulator (``simulator.dropin``)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from satbench.core.llama_argv import ARGV_FLAGS, settings_from_argv
from satbench.core.llama_flags import LLAMA_SERVER_FLAGS, server_flag
from satbench.simulator.dropin import add_llama_flags, apply_llama_flags
from satbench.simulator.profile import load_profile

HELP = Path(__file__).parent / "fixtures" / "llamacpp" / "llama-server-help.txt"


def help_options() -> set[tuple[tuple[str, ...], bool]]:
    """Each option of the recorded ``llama-server --help``: its spellings, and whether a value follows them."""
    options = set()
    for line in HELP.read_text().splitlines():
        if not line.startswith("-") or line.startswith("-----"):
            continue
        spec = re.split(r"\s{2,}", re.sub(r",\s+", ", ", line), maxsplit=1)[0]
        names = spec.split(", ")
        last, _, metavar = names[-1].partition(" ")
        options.add((tuple([*names[:-1], last]), bool(metavar)))
    return options


def test_the_table_is_the_builds_help() -> None:
    table = {(flag.names, flag.takes_value) for flag in LLAMA_SERVER_FLAGS}
    assert table == help_options()


def test_each_capacity_setting_names_a_flag_of_the_table_and_reads_every_spelling() -> None:
    for setting, flag in ARGV_FLAGS.items():
        option = server_flag(flag.flag)
        assert set(flag.names) | set(flag.negatives) == set(option.names), setting
        for name in flag.names:  # any spelling of the option sets the setting, as llama-server reads them
            argv = ["llama-server", name] + ([] if flag.kind == "switch" else ["2"])
            values, _ = settings_from_argv(argv, {})
            field = {"ctx_size": "ctx_per_slot", "cpu_moe": "n_cpu_moe"}.get(setting, setting)
            assert values[field] not in (None, "default"), (setting, name, values[field])


def test_the_drop_in_takes_every_spelling_and_an_off_form_turns_its_option_off() -> None:
    parser = argparse.ArgumentParser()
    add_llama_flags(parser)
    profile = load_profile("dense")
    for spelled, expected in (("--kv-unified", True), ("-kvu", True), ("-no-kvu", False), ("--no-kv-unified", False)):
        args = parser.parse_args(["-np", "2", spelled])
        args.slots, args.seed = None, None
        served, _ = apply_llama_flags(profile, args, {})
        assert (served.server.slot_ctx_tokens == 0) is expected, spelled  # unified: each slot may use all of -c
    for spelled in ("-np", "--parallel"):
        args = parser.parse_args([spelled, "3"])
        args.slots, args.seed = None, None
        served, _ = apply_llama_flags(profile, args, {})
        assert served.server.slots == 3, spelled
