def sync_loss(acc, loss):
    return acc.reduce(loss)
