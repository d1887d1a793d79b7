"""A module that never reads the environment itself (so its `int` stays the builtin in local
mode), handed a rank's text by one that does: its comparison every rank answers alike holds."""


def is_launched(local_rank_text):
    return int(local_rank_text) != -1
