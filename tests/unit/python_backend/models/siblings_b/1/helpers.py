def who():
    return "b"
