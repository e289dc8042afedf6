class Stop(BaseException):
    pass


raise Stop("stop everything")
