from helpers import who

VALUE = "deep-" + who()
