"""dev/sass-loops.py, the static loop census of a kernel's SASS: which backward branches count as
the product loops (their body holds HGMMA or HMMA), smallest first, and how an opcode is read
from an instruction. Runs without cuobjdump: the SASS is given as (address, text) pairs."""

import importlib.util
from pathlib import Path

DEV = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("sass_loops", DEV / "sass-loops.py")
sass_loops = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sass_loops)


def test_opcode_drops_the_guard_and_the_modifiers():
    assert sass_loops.opcode("@!P0 IMAD.WIDE.U32 R14, R5, R24, R14") == "IMAD"
    assert sass_loops.opcode("@UP1 HGMMA.64x16x16.F32.BF16 R40, gdesc[UR4], RZ") == "HGMMA"
    assert sass_loops.opcode("BAR.SYNC.DEFER_BLOCKING 0x0") == "BAR"


def test_loops_are_the_back_edges_around_products_smallest_first():
    code = [
        (0x000, "MOV R1, R2"),
        (0x010, "HMMA.16816.F32 R4, R8, R12, R4"),      # outer loop body starts at 0x000
        (0x020, "IMAD R3, R3, 0x4, R1"),                # inner loop body starts at 0x020
        (0x030, "HGMMA.64x16x16.F32.BF16 R40, gdesc[UR4], R40"),
        (0x040, "@P0 BRA 0x20"),                        # inner back edge
        (0x050, "FADD R5, R5, R6"),
        (0x060, "@!P1 BRA 0x0"),                        # outer back edge
        (0x070, "IADD3 R7, R7, 0x1, RZ"),               # a loop without products
        (0x080, "@P2 BRA 0x70"),
        (0x090, "EXIT"),
    ]
    assert sass_loops.loops(code, min_bytes=0) == [(0x20, 0x40), (0x0, 0x60)]
    # A body shorter than min_bytes (here the inner loop's 0x20 bytes) is left out.
    assert sass_loops.loops(code, min_bytes=0x30) == [(0x0, 0x60)]
