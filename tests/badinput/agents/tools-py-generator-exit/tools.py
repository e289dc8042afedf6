raise GeneratorExit('bye')
