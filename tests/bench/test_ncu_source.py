"""benchmarks/ncu_source.py on a small export in Nsight Compute's `--page source --csv` layout."""

from __future__ import annotations

from bench_support import load_script

EXPORT = '''"Kernel Name","cvl_k",
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed","stall_wait","stall_long_sb","stall_wait (Not Issued)"
"0x10","      FFMA R1, R2, R3, R4","10","9","1,000","10","0","9"
"0x20","      MUFU.EX2 R1, R1","30","30","1000","20","0","20"
"0x30","      SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R5","0","0","500","0","0","0"
"0x40","@P0   BRA 0x80","60","60","500","0","60","0"
'''


def _script():
    return load_script("ncu_source")


def test_summary_and_listing(tmp_path, capsys):
    w = _script()
    path = tmp_path / "k.csv"
    path.write_text(EXPORT)
    lines = w.read(path)
    assert [x.opcode for x in lines] == ["FFMA", "MUFU", "SYNCS", "BRA"]
    assert lines[0].executed == 1000 and lines[3].stalls == {"long_sb": 60.0}  # "Not Issued" columns left out
    listing = tmp_path / "k.txt"
    assert w.main([str(path), "--elements", "3200", "--per", "10", "--listing", str(listing)]) == 0
    out = capsys.readouterr().out
    assert "issued instructions per element: 30.00" in out  # 3000 warp instructions x 32 lanes / 3200
    assert "samples on mbarrier waits: 60.0%" in out  # the branch after the try: 60 of 100 samples
    assert "stall samples by reason: long_sb 60.0%, wait 30.0%" in out
    text = listing.read_text().splitlines()
    assert text[4].split()[:3] == ["3", "50.00", "60"] and text[4].endswith("long_sb=60")


def test_not_an_export_exits_1(tmp_path, capsys):
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    assert _script().main([str(path)]) == 1
    assert "not `ncu --page source --csv` output" in capsys.readouterr().err
