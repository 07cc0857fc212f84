#pragma once
// Sums of doubles over the parts a rank holds and over every rank, exact: the
// same bits in any order and grouping, so at any number of ranks and any
// share of the parts between them (reproducible mode's statistics).

#include <vector>

#include "kdp/dist/communicator.hpp"

namespace kdp::dist::detail {

/// Entry k of the result is the sum of entry k of every part of every rank of
/// `comm` (every rank calls this together; parts have one length over all
/// ranks, and a rank may hold none). Each entry's terms are rounded onto one
/// grid, 2^q with q set by the largest magnitude of that entry over every
/// part of every rank (a max is exact), coarse enough that every partial sum
/// of at most `terms` rounded values is a double without rounding; this keeps
/// about 51 - log2(terms) bits below the largest term. An entry with a NaN or
/// an infinity anywhere is their plain sum (not a number either way).
std::vector<double> exact_sum(Communicator& comm, const std::vector<std::vector<double>>& parts,
                              size_t length, int terms);

/// The grid of up to `terms` values below `largest` (finite) in magnitude,
/// as e with m = 1.5 2^e: (x + m) - m rounds x to a multiple of 2^(e - 52)
/// (to nearest even) and subtracting m back is exact, and every partial sum
/// of such rounded values is a double without rounding.
int grid_exponent(double largest, int terms);

}  // namespace kdp::dist::detail
