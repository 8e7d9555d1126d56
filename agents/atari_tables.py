"""The papers' Atari scores: Tables 9 (50M steps) and 10 (200M steps) of the recurrent-FWP appendix.

``PAPER_SCORES[step][game][core] = (mean, std)``: the mean and std of 5 run means, each over 30
episodes. Games are Gymnasium names (``envs.atari.PAPER_GAMES``), cores the ``--core`` names:
Feedforward ``ff``, LSTM ``lstm``, LT ``linear``, Delta Net ``delta``, RDN ``rec_delta``,
Delta RNN ``delta_rnn``. Extracted from the appendix text (tests/data holds the two tables;
tests/test_evaluate.py parses them again and checks that the two agree). Two figures are read as the
appendix prints them, typos included: Delta RNN on James Bond at 50M is "2,929.3", and the
Delta Net on Zaxxon at 200M is printed "1,0523" (read as 10,523).
"""
from __future__ import annotations

import math

# Row labels of the tables -> game names; column order -> core names.
TABLE_ROWS: dict[str, str] = {
    "Alien": "Alien", "Amidar": "Amidar", "Assault": "Assault", "Battlezone": "BattleZone", "Berzerk": "Berzerk",
    "B. Heist": "BankHeist", "B. Rider": "BeamRider", "D. Attack": "DemonAttack", "Gopher": "Gopher",
    "James Bond": "Jamesbond", "Kung-fu": "KungFuMaster", "MsPacman": "MsPacman", "Pong": "Pong",
    "Q*Bert": "Qbert", "Robotank": "Robotank", "Seaquest": "Seaquest", "S. Invaders": "SpaceInvaders",
    "Stargunner": "StarGunner", "Up'n down": "UpNDown", "Zaxxon": "Zaxxon",
}
TABLE_COLUMNS: dict[str, str] = {"ff": "Feedforward", "lstm": "LSTM", "linear": "LT", "delta": "Delta Net",
                                 "rec_delta": "RDN", "delta_rnn": "Delta RNN"}
TABLE_OF_STEP: dict[int, str] = {50_000_000: "Table 9", 200_000_000: "Table 10"}
# A run's checkpoint counts as a table's budget within this fraction past it (a checkpoint is
# written at the first update past a milestone).
STEP_TOLERANCE = 0.01


def paper_step(step: int) -> int | None:
    """50M or 200M if ``step`` is within STEP_TOLERANCE of it, else None."""
    for s in TABLE_OF_STEP:
        if abs(step - s) <= STEP_TOLERANCE * s:
            return s
    return None


def format_score(value: float, like: float | None = None) -> str:
    """A score as the tables print it: thousands separated, no decimals from 100 up (as the
    papers do), one from 10, else two; the decimals follow ``like`` (a std printed as its mean)."""
    if not math.isfinite(value):
        return "nan"
    ref = abs(value if like is None else like)
    return f"{value:,.{0 if ref >= 100 else 1 if ref >= 10 else 2}f}"


def format_mean_std(mean: float, std: float) -> str:
    """"mean ± std", both with the mean's decimals (:func:`format_score`)."""
    return f"{format_score(mean)} ± {format_score(std, mean)}"

PAPER_SCORES: dict[int, dict[str, dict[str, tuple[float, float]]]] = {
    50_000_000: {
        "Alien": {"ff": (1985, 90), "lstm": (846, 81), "linear": (2135, 184), "delta": (4704, 452), "rec_delta": (1754, 48), "delta_rnn": (3420, 834)},
        "Amidar": {"ff": (208, 11), "lstm": (233, 10), "linear": (320, 16), "delta": (339, 28), "rec_delta": (368, 23), "delta_rnn": (216, 14)},
        "Assault": {"ff": (4658, 2147), "lstm": (7551, 1774), "linear": (2764, 380), "delta": (5710, 2643), "rec_delta": (8088, 2851), "delta_rnn": (7503, 2794)},
        "BattleZone": {"ff": (12267, 620), "lstm": (6327, 380), "linear": (933, 351), "delta": (6780, 461), "rec_delta": (7373, 431), "delta_rnn": (7040, 1098)},
        "Berzerk": {"ff": (326, 21), "lstm": (474, 17), "linear": (323, 6), "delta": (331, 24), "rec_delta": (336, 27), "delta_rnn": (305, 8)},
        "BankHeist": {"ff": (323, 13), "lstm": (327, 11), "linear": (309, 11), "delta": (321, 8), "rec_delta": (316, 10), "delta_rnn": (324, 10)},
        "BeamRider": {"ff": (9932, 1592), "lstm": (13638, 1571), "linear": (6695, 941), "delta": (9185, 630), "rec_delta": (18156, 1522), "delta_rnn": (13429, 884)},
        "DemonAttack": {"ff": (36255, 3566), "lstm": (31447, 1850), "linear": (8939, 950), "delta": (31359, 3362), "rec_delta": (41726, 6308), "delta_rnn": (36807, 3700)},
        "Gopher": {"ff": (10356, 378), "lstm": (13765, 808), "linear": (8197, 1720), "delta": (8707, 2381), "rec_delta": (19775, 1448), "delta_rnn": (25445, 1963)},
        "Jamesbond": {"ff": (2942, 56), "lstm": (3020, 68), "linear": (2425, 174), "delta": (3338, 137), "rec_delta": (2979, 176), "delta_rnn": (2929.3, 408)},
        "KungFuMaster": {"ff": (5449, 82), "lstm": (15216, 818), "linear": (3722, 330), "delta": (8095, 240), "rec_delta": (9201, 384), "delta_rnn": (7388, 491)},
        "MsPacman": {"ff": (1737, 53), "lstm": (1676, 86), "linear": (1647, 101), "delta": (2116, 30), "rec_delta": (2584, 121), "delta_rnn": (2287, 32)},
        "Pong": {"ff": (21, 0), "lstm": (21, 0), "linear": (21, 0), "delta": (21, 0), "rec_delta": (21, 0), "delta_rnn": (21, 0)},
        "Qbert": {"ff": (4967, 266), "lstm": (3905, 252), "linear": (4693, 195), "delta": (6248, 204), "rec_delta": (5897, 357), "delta_rnn": (6626, 240)},
        "Robotank": {"ff": (7.1, 0.7), "lstm": (7.6, 0.7), "linear": (4.8, 0.3), "delta": (7.2, 0.7), "rec_delta": (7.5, 0.8), "delta_rnn": (7, 0.5)},
        "Seaquest": {"ff": (469, 1), "lstm": (708, 1), "linear": (1812, 61), "delta": (8853, 937), "rec_delta": (686, 1), "delta_rnn": (5123, 335)},
        "SpaceInvaders": {"ff": (48150, 7233), "lstm": (12461, 1624), "linear": (2345, 74), "delta": (25769, 10156), "rec_delta": (27213, 3359), "delta_rnn": (2847, 10)},
        "StarGunner": {"ff": (9397, 2193), "lstm": (8337, 1094), "linear": (8915, 713), "delta": (11599, 3454), "rec_delta": (9737, 1396), "delta_rnn": (9523, 2214)},
        "UpNDown": {"ff": (185632, 16490), "lstm": (155847, 15318), "linear": (57435, 2283), "delta": (120806, 16261), "rec_delta": (126140, 19078), "delta_rnn": (148759, 28492)},
        "Zaxxon": {"ff": (4863, 872), "lstm": (2737, 121), "linear": (2719, 701), "delta": (4265, 263), "rec_delta": (5285, 504), "delta_rnn": (3903, 648)},
    },
    200_000_000: {
        "Alien": {"ff": (3816, 139), "lstm": (6184, 558), "linear": (4751, 530), "delta": (15133, 1122), "rec_delta": (11220, 621), "delta_rnn": (12177, 968)},
        "Amidar": {"ff": (433, 27), "lstm": (349, 22), "linear": (646, 32), "delta": (432, 27), "rec_delta": (832, 11), "delta_rnn": (269, 17)},
        "Assault": {"ff": (6407, 3430), "lstm": (7977, 2611), "linear": (6465, 1437), "delta": (7525, 1703), "rec_delta": (8647, 3061), "delta_rnn": (7670, 952)},
        "BattleZone": {"ff": (60527, 12345), "lstm": (24873, 1240), "linear": (2667, 386), "delta": (19907, 1409), "rec_delta": (10980, 1104), "delta_rnn": (17180, 1493)},
        "Berzerk": {"ff": (343, 23), "lstm": (1150, 92), "linear": (480, 38), "delta": (333, 7), "rec_delta": (348, 17), "delta_rnn": (332, 17)},
        "BankHeist": {"ff": (331, 10), "lstm": (327, 11), "linear": (317, 8), "delta": (321, 8), "rec_delta": (328, 10), "delta_rnn": (328, 8)},
        "BeamRider": {"ff": (21873, 2000), "lstm": (18024, 933), "linear": (22444, 755), "delta": (28594, 5508), "rec_delta": (23934, 2292), "delta_rnn": (28973, 3663)},
        "DemonAttack": {"ff": (74904, 10941), "lstm": (69750, 9593), "linear": (57715, 5009), "delta": (78601, 16907), "rec_delta": (67039, 5714), "delta_rnn": (92205, 17933)},
        "Gopher": {"ff": (61350, 3891), "lstm": (124914, 22422), "linear": (48261, 7727), "delta": (86168, 5069), "rec_delta": (86008, 11815), "delta_rnn": (101974, 10200)},
        "Jamesbond": {"ff": (56459, 7292), "lstm": (25106, 5889), "linear": (16223, 1118), "delta": (54336, 7165), "rec_delta": (32923, 7968), "delta_rnn": (53344, 4768)},
        "KungFuMaster": {"ff": (12292, 613), "lstm": (24447, 407), "linear": (13969, 803), "delta": (15064, 929), "rec_delta": (20319, 363), "delta_rnn": (15068, 513)},
        "MsPacman": {"ff": (2499, 141), "lstm": (3431, 197), "linear": (3052, 128), "delta": (4180, 139), "rec_delta": (4168, 585), "delta_rnn": (3500, 205)},
        "Pong": {"ff": (21, 0), "lstm": (21, 0), "linear": (21, 0), "delta": (21, 0), "rec_delta": (21, 0), "delta_rnn": (21, 0)},
        "Qbert": {"ff": (8655, 371), "lstm": (11513, 910), "linear": (8389, 349), "delta": (521839, 36192), "rec_delta": (987275, 0), "delta_rnn": (10381, 1259)},
        "Robotank": {"ff": (7.8, 0.8), "lstm": (7.6, 0.7), "linear": (7.7, 0.9), "delta": (7.5, 0.4), "rec_delta": (7.9, 0.6), "delta_rnn": (7.5, 0.5)},
        "Seaquest": {"ff": (667, 1), "lstm": (12643, 1627), "linear": (12425, 1910), "delta": (12790, 1512), "rec_delta": (4373, 504), "delta_rnn": (13898, 1674)},
        "SpaceInvaders": {"ff": (53455, 6694), "lstm": (137657, 2276), "linear": (2333, 110), "delta": (86132, 5483), "rec_delta": (170871, 80), "delta_rnn": (58181, 14987)},
        "StarGunner": {"ff": (11564, 4598), "lstm": (12194, 7038), "linear": (12035, 6995), "delta": (11734, 6827), "rec_delta": (13026, 6431), "delta_rnn": (11635, 6065)},
        "UpNDown": {"ff": (185632, 16490), "lstm": (231157, 10603), "linear": (252555, 16331), "delta": (208563, 22803), "rec_delta": (240003, 26849), "delta_rnn": (159296, 25013)},
        "Zaxxon": {"ff": (11960, 538), "lstm": (11619, 663), "linear": (7371, 932), "delta": (10523, 568), "rec_delta": (9126, 313), "delta_rnn": (11365, 678)},
    },
}
