"""Scoring Atari returns: human-normalised scores, and Atari-5's estimate of the 57-game median.

``human_normalized(game, score) = (score - random) / (human - random)``: 0 is the score of a
uniformly random policy, 1 that of the professional human tester. The random and human scores of
the 57 games are the table later papers share (Mnih et al. 2015, "Human-level control through deep
reinforcement learning", Nature; Badia et al. 2020, "Agent57", ICML, for all 57 games), with the
numbers of DeepMind's DQN Zoo (``dqn_zoo/atari_data.py``): returns averaged over episodes that
begin with 1 to 30 no-ops and last at most 108,000 frames. Games are named as ``envs.atari``
names them (``"BattleZone"``, ``"MsPacman"``, ``"Qbert"``).

:func:`atari5_median` is the Atari-5 estimate (Aitchison, Sweetser and Hutter 2023, "Atari-5:
Distilling the Arcade Learning Environment down to Five Games", ICML) of the median
human-normalised score over the 57 games, from five games' human-normalised scores.
"""
from __future__ import annotations

import math

# game -> (random score, human score), the 57 games of DQN Zoo's atari_data.py.
REFERENCE_SCORES: dict[str, tuple[float, float]] = {
    "Alien": (227.8, 7127.7), "Amidar": (5.8, 1719.5), "Assault": (222.4, 742.0), "Asterix": (210.0, 8503.3),
    "Asteroids": (719.1, 47388.7), "Atlantis": (12850.0, 29028.1), "BankHeist": (14.2, 753.1),
    "BattleZone": (2360.0, 37187.5), "BeamRider": (363.9, 16926.5), "Berzerk": (123.7, 2630.4),
    "Bowling": (23.1, 160.7), "Boxing": (0.1, 12.1), "Breakout": (1.7, 30.5), "Centipede": (2090.9, 12017.0),
    "ChopperCommand": (811.0, 7387.8), "CrazyClimber": (10780.5, 35829.4), "Defender": (2874.5, 18688.9),
    "DemonAttack": (152.1, 1971.0), "DoubleDunk": (-18.6, -16.4), "Enduro": (0.0, 860.5),
    "FishingDerby": (-91.7, -38.7), "Freeway": (0.0, 29.6), "Frostbite": (65.2, 4334.7),
    "Gopher": (257.6, 2412.5), "Gravitar": (173.0, 3351.4), "Hero": (1027.0, 30826.4),
    "IceHockey": (-11.2, 0.9), "Jamesbond": (29.0, 302.8), "Kangaroo": (52.0, 3035.0),
    "Krull": (1598.0, 2665.5), "KungFuMaster": (258.5, 22736.3), "MontezumaRevenge": (0.0, 4753.3),
    "MsPacman": (307.3, 6951.6), "NameThisGame": (2292.3, 8049.0), "Phoenix": (761.4, 7242.6),
    "Pitfall": (-229.4, 6463.7), "Pong": (-20.7, 14.6), "PrivateEye": (24.9, 69571.3),
    "Qbert": (163.9, 13455.0), "Riverraid": (1338.5, 17118.0), "RoadRunner": (11.5, 7845.0),
    "Robotank": (2.2, 11.9), "Seaquest": (68.4, 42054.7), "Skiing": (-17098.1, -4336.9),
    "Solaris": (1236.3, 12326.7), "SpaceInvaders": (148.0, 1668.7), "StarGunner": (664.0, 10250.0),
    "Surround": (-10.0, 6.5), "Tennis": (-23.8, -8.3), "TimePilot": (3568.0, 5229.2),
    "Tutankham": (11.4, 167.6), "UpNDown": (533.4, 11693.2), "Venture": (0.0, 1187.5),
    "VideoPinball": (16256.9, 17667.9), "WizardOfWor": (563.5, 4756.5), "YarsRevenge": (3092.9, 54576.9),
    "Zaxxon": (32.5, 9173.3),
}

# Atari-5's regression weights, one per game. The paper's code (github.com/maitchison/Atari-5,
# atari5.py) fits them by least squares without intercept on its dataset.csv (published scores of
# 44 algorithms with all five games); these are that fit, as the first author's code uses them
# (github.com/maitchison/PPO, tools/plot_util.py, AtariScoreNormalizer.SUBSETS["Atari_5"]). The
# fit normalised with the repository's Atari-Human.csv, whose random scores differ from the table
# above in the second decimal for DoubleDunk (-18.55), NameThisGame (2292.35) and Qbert (163.88).
ATARI5_WEIGHTS: dict[str, float] = {
    "BattleZone": 0.3819751237831753, "DoubleDunk": 0.0679099488887574, "NameThisGame": 0.310804148620847,
    "Phoenix": 0.12412619402774641, "Qbert": 0.08048518286466755,
}


def human_normalized(game: str, score: float) -> float:
    """``(score - random) / (human - random)`` for ``game``: 0.0 at the random policy's score, 1.0
    at the human tester's. ValueError for a game not among the 57, listing them."""
    if game not in REFERENCE_SCORES:
        raise ValueError(f"no human and random scores for Atari game {game!r}; the 57 games: "
                         f"{', '.join(REFERENCE_SCORES)}")
    random, human = REFERENCE_SCORES[game]
    return (score - random) / (human - random)


def atari5_median(normalized: dict[str, float]) -> float:
    """Atari-5's estimate of the median human-normalised score over the 57 games, from
    ``normalized``: game -> human-normalised score (:func:`human_normalized`'s scale, 1.0 = human)
    of at least the five Atari-5 games (others are ignored). ValueError if one is missing.

    The paper's regression is on percentages (100 = human): with x_g each game's score in percent,
    ``log10(1 + median) = sum_g w_g * log10(1 + max(x_g, 0))``, no intercept (:data:`ATARI5_WEIGHTS`).
    As log10(1 + x) is not scale-free, the scores are taken to percent and the estimate brought
    back to this module's scale (1.0 = human)."""
    missing = [game for game in ATARI5_WEIGHTS if game not in normalized]
    if missing:
        raise ValueError(f"Atari-5 needs the human-normalised scores of {', '.join(ATARI5_WEIGHTS)}; "
                         f"missing {', '.join(missing)}")
    log_median = sum(w * math.log10(1 + max(100 * normalized[game], 0.0)) for game, w in ATARI5_WEIGHTS.items())
    return (10 ** log_median - 1) / 100
