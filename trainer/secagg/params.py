"""Parameters of one secure-aggregation session and the rule that chooses them.

``docs/secure-aggregation.md``, "Fixed-point encoding", "Overflow bound" and "SecAgg+ (sparse mode)".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from accounting.errors import InvalidInputError
from planner.schema import SecaggMode
from trainer.secagg.encoding import MAX_MODULUS_BITS, MAX_SCALED_BOUND, check_modulus, required_modulus_bits
from trainer.secagg.graph import scaled_group_threshold
from trainer.secagg.prg import DEFAULT_PROTOCOL_VERSION, PRG_OF_VERSION

# The default scale keeps words at 32 bits when that still leaves at least 2^12
# quantisation steps below the value bound; otherwise it moves to 64-bit words.
MIN_STEPS_FOR_32_BITS = 2.0**12

# What a client hands the session: float vectors the client encodes with the session's
# fixed-point scale (the continuous path), or integers already reduced mod 2^b (the discrete
# mechanism's shares, docs/secure-aggregation.md §Discrete noise), which the session sums
# mod 2^b and releases undecoded.
InputEncoding = Literal["fixed_point", "residues"]


@dataclass(frozen=True)
class SecAggParams:
    """One pool's session: at most ``num_clients`` clients, |x_i| <= ``value_bound`` per coordinate.

    ``threshold`` (the pool's m_P) is the fewest surviving inputs the server may unmask;
    ``modulus_bits`` is b (sums live in Z_(2^b)), checked on construction to be wide enough
    that the sum of ``num_clients`` encodings at ``scale`` never wraps, and at most 64.
    ``neighbours`` is SecAgg+'s degree k and ``share_threshold`` the Shamir threshold t of
    each share group (sparse mode only; ``None``: the pool threshold scaled to the group).
    """

    num_clients: int
    threshold: int
    value_bound: float
    scale: float
    modulus_bits: int
    mode: SecaggMode = "full"
    neighbours: int | None = None
    share_threshold: int | None = None
    encoding: InputEncoding = "fixed_point"
    # The protocol's version, which fixes the mask generator (prg.PRG_OF_VERSION): every
    # party of a session must speak it (docs/secure-aggregation.md §Protocol versions).
    protocol_version: int = DEFAULT_PROTOCOL_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.num_clients, int) or isinstance(self.num_clients, bool) or self.num_clients < 1:
            raise InvalidInputError("num_clients", f"must be a positive integer, got {self.num_clients!r}")
        if (
            not isinstance(self.threshold, int)
            or isinstance(self.threshold, bool)
            or not 1 <= self.threshold <= self.num_clients
        ):
            raise InvalidInputError(
                "threshold", f"must be an integer in [1, num_clients={self.num_clients}], got {self.threshold!r}"
            )
        if self.protocol_version not in PRG_OF_VERSION or isinstance(self.protocol_version, bool):
            raise InvalidInputError(
                "protocol_version",
                f"must be one of {', '.join(map(str, PRG_OF_VERSION))}, got {self.protocol_version!r}",
            )
        if self.encoding == "residues":
            # The caller chose b for its integers (their wrap-around is its to bound and
            # account, planner.discrete.wrap_probability); value_bound and scale are unused.
            if (not isinstance(self.modulus_bits, int) or isinstance(self.modulus_bits, bool)
                    or not 1 <= self.modulus_bits <= MAX_MODULUS_BITS):
                raise InvalidInputError(
                    "modulus_bits", f"must be an integer in [1, {MAX_MODULUS_BITS}], got {self.modulus_bits!r}"
                )
        elif self.encoding == "fixed_point":
            check_modulus(self.num_clients, self.value_bound, self.scale, self.modulus_bits)
        else:
            raise InvalidInputError("encoding", f"must be fixed_point or residues, got {self.encoding!r}")
        if self.mode not in get_args(SecaggMode):
            raise InvalidInputError("mode", f"must be 'full' or 'sparse', got {self.mode!r}")
        if self.mode == "full" and self.neighbours is not None:
            raise InvalidInputError("neighbours", "only sparse mode takes a neighbour count")
        if self.mode == "sparse" and (
            not isinstance(self.neighbours, int) or isinstance(self.neighbours, bool) or self.neighbours < 2
        ):
            raise InvalidInputError("neighbours", f"sparse mode needs an integer >= 2, got {self.neighbours!r}")
        if self.share_threshold is not None and (
            self.mode != "sparse"
            or not isinstance(self.share_threshold, int)
            or isinstance(self.share_threshold, bool)
            or not 1 <= self.share_threshold <= (self.neighbours or 0) + 1
        ):
            raise InvalidInputError(
                "share_threshold", f"must be an integer in [1, neighbours + 1] in sparse mode, got {self.share_threshold!r}"
            )

    def group_threshold(self, group_size: int, num_participants: int) -> int:
        """Shamir threshold of a share group of ``group_size`` in a session of ``num_participants``.

        The pool threshold t in the complete graph; else ``share_threshold`` (Bell et al.'s t,
        docs/secure-aggregation.md §SecAgg) or, without one, t scaled to the group.
        """
        if group_size >= num_participants or self.share_threshold is None:
            return scaled_group_threshold(self.threshold, group_size, num_participants)
        return min(self.share_threshold, group_size)


def default_scale(num_clients: int, value_bound: float) -> float:
    """Largest power of two whose modulus fits 32 bits if that leaves >= 2^12 steps below the bound, else 64 bits.

    The 64-bit choice is also capped by value_bound * scale <= 2^52 (exact float64 rounding).
    """
    scale_32 = _largest_power_of_two_scale(num_clients, value_bound, 32)
    if scale_32 is not None and value_bound * scale_32 >= MIN_STEPS_FOR_32_BITS:
        return scale_32
    scale_64 = _largest_power_of_two_scale(num_clients, value_bound, 64)
    if scale_64 is None:
        raise InvalidInputError(
            "value_bound",
            f"{num_clients} clients with |x| <= {value_bound:g} do not fit 64 bits at any scale >= 2^-64",
        )
    return scale_64


def choose_params(
    num_clients: int,
    threshold: int,
    value_bound: float,
    scale: float | None = None,
    mode: SecaggMode = "full",
    neighbours: int | None = None,
    share_threshold: int | None = None,
    dropout_fraction: float = 0.0,
    protocol_version: int = DEFAULT_PROTOCOL_VERSION,
) -> SecAggParams:
    """The narrowest safe modulus b = bitlen(2 n (floor(B s) + 1)) + 1 for these clients, bound and scale.

    ``scale=None`` picks ``default_scale``; ``mode="sparse"`` with ``neighbours=None`` picks
    Bell et al.'s k and t for a third of the clients corrupt and at most
    ``dropout_fraction`` dropping out (``planner.harary``; the complete graph when no
    sparse one meets the bounds). The
    trainer passes its own (k, t) per session (``planner.secagg.secagg_graph``).
    ``protocol_version`` fixes the mask generator (docs/secure-aggregation.md §Protocol
    versions). Raises ``InvalidInputError`` when b > 64.
    """
    # Validates num_clients and value_bound before they reach the scale search.
    required_modulus_bits(num_clients, value_bound, 1.0)
    if scale is None:
        scale = default_scale(num_clients, value_bound)
    if mode == "sparse" and neighbours is None:
        from planner.harary import DEFAULT_CORRUPT_FRACTION, harary_parameters  # pure math, below trainer

        found = harary_parameters(num_clients, DEFAULT_CORRUPT_FRACTION, dropout_fraction)
        if found is None:
            neighbours = max(2, num_clients - 1)  # complete graph: the pool threshold applies
        else:
            neighbours, share_threshold = found.neighbours, found.share_threshold
    bits = required_modulus_bits(num_clients, value_bound, scale)
    return SecAggParams(
        num_clients=num_clients,
        threshold=threshold,
        value_bound=float(value_bound),
        scale=float(scale),
        modulus_bits=bits,
        mode=mode,
        neighbours=neighbours,
        share_threshold=share_threshold,
        protocol_version=protocol_version,
    )


def residue_params(
    num_clients: int,
    threshold: int,
    modulus_bits: int,
    mode: SecaggMode = "full",
    neighbours: int | None = None,
    share_threshold: int | None = None,
    protocol_version: int = DEFAULT_PROTOCOL_VERSION,
) -> SecAggParams:
    """A session over integers the clients already reduced mod 2^``modulus_bits``.

    The result's sum is the residue sum mod 2^b (words of ``word_dtype(b)``), never decoded:
    its caller decodes it (``trainer.secagg.discrete.server_decode``).
    """
    return SecAggParams(
        num_clients=num_clients,
        threshold=threshold,
        value_bound=1.0,
        scale=1.0,
        modulus_bits=modulus_bits,
        mode=mode,
        neighbours=neighbours,
        share_threshold=share_threshold,
        encoding="residues",
        protocol_version=protocol_version,
    )


def _largest_power_of_two_scale(num_clients: int, value_bound: float, word_bits: int) -> float | None:
    exponent = math.floor(math.log2(MAX_SCALED_BOUND / value_bound))
    while exponent >= -64:
        scale = 2.0**exponent
        if required_modulus_bits(num_clients, value_bound, scale) <= word_bits:
            return scale
        exponent -= 1
    return None
