def who():
    return "a"
